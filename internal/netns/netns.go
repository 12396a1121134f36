// Package netns runs pinlab inside a private network namespace: a
// namespace whose only interface is lo (and, with per-pod namespaces, the
// pod network's bridge and veths: loopback.Sealed), so no route leads out
// of it, and
// where whole private ranges (the real control plane's pod and Service
// CIDRs) are made local on lo. Traffic to those addresses never leaves the
// namespace, which is what makes them safe to use; outside it they stay
// forbidden (package loopback).
//
// The parent calls Run, which re-executes the current program in a new
// network namespace (and a new user namespace when not root, as
// `unshare -rn` does); the child sees Inside() and calls Setup. Command
// runs another program inside a running child's namespace, as
// `nsenter -t PID -n` does.
//
// Linux only; elsewhere every function returns ErrUnsupported or false.
package netns

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"syscall"
)

// MarkerEnv is the environment variable Run sets in the child ("1"). Inside
// checks it together with the namespace's interfaces, so setting it by
// hand on a machine with a network does not make Inside true.
const MarkerEnv = "PINLAB_NETNS"

// ErrUnavailable marks errors from Run when the kernel refuses a new user
// or network namespace (unprivileged user namespaces disabled, a seccomp
// or AppArmor policy, a container without CAP_SYS_ADMIN). Its message says
// what to enable; callers may skip or fall back.
var ErrUnavailable = errors.New("netns: private network namespaces are unavailable")

// ErrUnsupported is returned on systems other than Linux.
var ErrUnsupported = errors.New("netns: private network namespaces need Linux")

// Config says what Run executes in the new namespace.
type Config struct {
	// Args are the arguments after the program name; the program is
	// always the current executable (os.Executable).
	Args []string
	// Env is the child's environment; nil means os.Environ(). Run adds
	// MarkerEnv=1 (replacing any MarkerEnv already there).
	Env []string
	// ExtraFiles become the child's fds 3, 4, ... (exec.Cmd.ExtraFiles),
	// typically listeners the parent opened on the host's loopback: a
	// socket keeps the namespace it was created in, so the child accepts
	// host connections on them. Run does not close them.
	ExtraFiles []*os.File
	// Started, when not nil, is called once with the child's pid after it
	// started (for Command and for `lab exec`), from Run's goroutine.
	Started func(pid int)
	// Stdout and Stderr, when not nil, receive the child's output (a
	// test that runs itself again in the namespace keeps its child's
	// lines); nil: this process's, inherited.
	Stdout, Stderr io.Writer
	// Killed, when not nil, is called with the signal that killed the
	// child, if one did (Run then returns 128 plus its number), from Run's
	// goroutine before Run returns.
	Killed func(syscall.Signal)
}

// Prefixes the real control plane tier makes local by default: the pod
// CIDR and the Service CIDR.
var (
	PodPrefix     = netip.MustParsePrefix("10.244.0.0/16")
	ServicePrefix = netip.MustParsePrefix("10.96.0.0/16")
)
