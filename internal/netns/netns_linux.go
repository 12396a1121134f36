package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
)

// forwarded are the signals Run passes on to the child. A Ctrl-C in a
// terminal reaches the child twice (from the terminal, which signals the
// whole foreground process group, and from Run); pinlab's CLI cancels on
// the first and ignores the rest.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// killAfter bounds how long Run waits for the child after ctx ended and it
// sent SIGTERM, before SIGKILL.
const killAfter = 10 * time.Second

// Run re-executes the current program with cfg.Args in a new network
// namespace, and a new user namespace mapping the caller's uid and gid to
// 0 when the caller is not root, and waits for it. Stdio is inherited
// (but for Config.Stdout and Stderr); SIGINT, SIGTERM and SIGHUP are
// forwarded; when ctx ends the child gets SIGTERM, then SIGKILL 10 s
// later. The child gets SIGTERM if Run's process dies first
// (PR_SET_PDEATHSIG), so that it stops what it started and removes its
// files as on Ctrl-C.
//
// It returns the child's exit code (128+N when signal N killed it), or an
// error if the child could not start: wrapping ErrUnavailable, with what to
// enable, when the kernel refuses the namespaces.
func Run(ctx context.Context, cfg Config) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("netns: finding the current executable: %w", err)
	}
	cmd := exec.Command(exe, cfg.Args...)
	cmd.Env = withMarker(cfg.Env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if cfg.Stdout != nil {
		cmd.Stdout = cfg.Stdout
	}
	if cfg.Stderr != nil {
		cmd.Stderr = cfg.Stderr
	}
	cmd.ExtraFiles = cfg.ExtraFiles
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = sysProcAttr(uid, gid)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	// PR_SET_PDEATHSIG fires when the thread that forked exits: keep this
	// goroutine on it until the child is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return 0, startError(err, uid)
	}
	if cfg.Started != nil {
		cfg.Started(cmd.Process.Pid)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var kill <-chan time.Time
	ctxDone := ctx.Done()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-ctxDone:
			ctxDone = nil
			_ = cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(killAfter)
			defer t.Stop()
			kill = t.C
		case <-kill:
			_ = cmd.Process.Kill()
		case err := <-done:
			if ws, ok := waitStatus(cmd.ProcessState); ok && ws.Signaled() && cfg.Killed != nil {
				cfg.Killed(ws.Signal())
			}
			return exitCode(cmd.ProcessState, err)
		}
	}
}

// sysProcAttr asks for a new network namespace and, for a caller other
// than root, a new user namespace in which the caller is root (as
// `unshare -rn`), which is what lets it configure the new namespace.
func sysProcAttr(uid, gid int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGTERM,
	}
	if uid != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a
}

// withMarker returns env (os.Environ() when nil) with MarkerEnv=1 in place
// of any MarkerEnv it had.
func withMarker(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, MarkerEnv+"=")
	})
	return append(out, MarkerEnv+"=1")
}

// startError explains a failed start; errors the kernel gives when it
// refuses the namespaces wrap ErrUnavailable.
func startError(err error, uid int) error {
	refused := false
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.EINVAL, syscall.ENOSPC, syscall.EUSERS} {
		refused = refused || errors.Is(err, e)
	}
	switch {
	case !refused:
		return fmt.Errorf("netns: starting the child: %w", err)
	case uid == 0:
		return fmt.Errorf("%w: creating a network namespace as root failed (%v): pinlab needs CAP_SYS_ADMIN (a container may have dropped it or forbid unshare by seccomp)", ErrUnavailable, err)
	}
	return fmt.Errorf("%w: creating a user and network namespace as uid %d failed (%v): enable unprivileged user namespaces "+
		"(sysctl user.max_user_namespaces > 0; kernel.unprivileged_userns_clone=1 where that sysctl exists; on Ubuntu 23.10+ "+
		"kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile allowing userns for pinlab), or run pinlab as root", ErrUnavailable, uid, err)
}

// exitCode turns how the child ended into an exit code as a shell
// reports it.
func exitCode(ps *os.ProcessState, err error) (int, error) {
	if ps == nil {
		return 0, fmt.Errorf("netns: waiting for the child: %w", err)
	}
	if ws, ok := waitStatus(ps); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// waitStatus is ps's wait status, if the process ended.
func waitStatus(ps *os.ProcessState) (syscall.WaitStatus, bool) {
	if ps == nil {
		return 0, false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ws, ok
}

// Inside reports whether this process runs in a namespace Run created:
// MarkerEnv is set and the network namespace has no way out (so
// the variable alone, set by hand, does not make a host with a network
// look private).
func Inside() bool {
	return os.Getenv(MarkerEnv) == "1" && sealed() == nil
}

// sealed returns an error naming an interface through which traffic could
// leave, if any (loopback.Sealed: lo, and the pod networks' bridges and
// veths, are not).
func sealed() error {
	if err := loopback.Sealed(); err != nil {
		return fmt.Errorf("netns: %w: this is not a private namespace", err)
	}
	return nil
}

// Setup prepares the namespace Run created, in the child: it brings lo up
// and makes each prefix local on lo (`ip route add local P dev lo`, so
// any address in it can be bound and reached, like 127.0.0.0/8; a route
// for P there already stays), then
// lets package loopback use those prefixes (loopback.Allow). It refuses,
// changing nothing, unless Inside is true. It needs the ip command
// (iproute2).
func Setup(prefixes ...netip.Prefix) error {
	if os.Getenv(MarkerEnv) != "1" {
		return fmt.Errorf("netns: refusing to set up: %s is not set, so this is not a namespace Run created", MarkerEnv)
	}
	if err := sealed(); err != nil {
		return fmt.Errorf("netns: refusing to set up: %w", err)
	}
	ip, err := lookTool("ip", "iproute2")
	if err != nil {
		return err
	}
	// add, not replace: in a namespace set up already (a command lab exec
	// runs there), a pod network may have routed part of a prefix to its
	// bridge (package podnet), which stays.
	cmds := [][]string{{"link", "set", "lo", "up"}}
	for _, p := range prefixes {
		cmds = append(cmds, []string{"route", "add", "local", p.Masked().String(), "dev", "lo"})
	}
	for _, args := range cmds {
		cmd := exec.Command(ip, args...)
		cmd.Env = append(os.Environ(), "LC_ALL=C") // strerror's English: "File exists" (EEXIST)
		if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
			return fmt.Errorf("netns: ip %s: %w: %s", strings.Join(args, " "), err, bytesTrim(out))
		}
	}
	for _, p := range prefixes {
		if err := loopback.Allow(p); err != nil {
			return err
		}
	}
	return nil
}

// Command returns a command that runs name with args inside the network
// namespace of process pid (a pinlab that Run started), through nsenter
// (util-linux): `nsenter -t PID -n` when pid shares our user namespace
// (root), `nsenter -t PID -U -n --preserve-credentials` otherwise (an
// unprivileged pinlab's namespace belongs to its user namespace).
func Command(pid int, name string, args ...string) *exec.Cmd {
	nsenter, err := lookTool("nsenter", "util-linux")
	cmd := exec.Command(nsenter, nsenterArgs(pid, sameUserNS(pid), name, args)...)
	if err != nil {
		cmd.Err = err
	}
	return cmd
}

// nsenterArgs returns nsenter's arguments for Command.
func nsenterArgs(pid int, sameUser bool, name string, args []string) []string {
	a := []string{"-t", strconv.Itoa(pid)}
	if !sameUser {
		a = append(a, "-U", "--preserve-credentials")
	}
	a = append(a, "-n", "--", name)
	return append(a, args...)
}

// sameUserNS reports whether pid is in our user namespace; when that
// cannot be read, it guesses from whether we are root.
func sameUserNS(pid int) bool {
	theirs, err1 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/user")
	ours, err2 := os.Readlink("/proc/self/ns/user")
	if err1 != nil || err2 != nil {
		return os.Getuid() == 0
	}
	return theirs == ours
}

// lookTool finds a system command, also in /usr/sbin and /sbin (often not
// on an unprivileged user's PATH).
func lookTool(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := dir + "/" + name
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("netns: the %s command is needed (Debian package %s)", name, pkg)
}

// bytesTrim returns out as a trimmed string.
func bytesTrim(out []byte) string { return strings.TrimSpace(string(out)) }
