// Package kubelab runs labs on real Kubernetes control planes: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler (package
// controlplane) in a private network namespace pinlab re-executes itself
// in (package netns), each seen by the lab as its API (lab.API), with
// pinlab's dataplane or the kernel's (the real kube-proxy and CoreDNS).
//
// `pinlab lab up --control-plane kubernetes` runs one control plane (Up),
// served to kubectl on the host through a forwarder on the host's
// loopback; `pinlab lab run --control-plane kubernetes` runs one per
// variant (Variants), each on its own /20 of the pod and Service ranges.
// Both start on the host (OnHost: Check, then Reexec with the listeners
// they bound there) and do their work inside the namespace.
package kubelab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/podnet"
)

// The real control plane's address ranges inside the network namespace:
// kubeadm's defaults. They are local addresses of that namespace only,
// which has no route out; outside it pinlab never sends to them. The root
// command makes them local (netns.Setup) in every pinlab that runs in such
// a namespace.
var (
	PodCIDR     = netns.PodPrefix
	ServiceCIDR = netns.ServicePrefix
)

// PodNetwork is how a real control plane's pods are networked.
type PodNetwork string

const (
	// PodNetworkShared puts every pod in the lab's namespace, its address
	// local on lo: a pod sees the node's sockets, as a hostNetwork pod.
	PodNetworkShared PodNetwork = "shared"
	// PodNetworkNetns gives each pod its own network namespace on a
	// bridge, set up by the CNI reference plugins (package podnet), as a
	// container runtime does.
	PodNetworkNetns PodNetwork = "netns"
)

// ParsePodNetwork checks a --pod-network value ("" is PodNetworkShared).
func ParsePodNetwork(s string) (PodNetwork, error) {
	switch PodNetwork(s) {
	case "", PodNetworkShared:
		return PodNetworkShared, nil
	case PodNetworkNetns:
		return PodNetworkNetns, nil
	}
	return "", fmt.Errorf("pod network %q: expected %s or %s", s, PodNetworkShared, PodNetworkNetns)
}

// OnHost reports whether this process runs on the host, where a command
// on a real control plane checks its tools (Check) and binds its host
// listeners, then runs itself in the namespace (Reexec); false inside.
func OnHost() bool { return !netns.Inside() }

// Check reports, before anything starts, whether a real control plane
// with dataplane dp and pod network pn can run here: the control plane's
// binaries (build/controlplane/build.sh), dp's tools (lab.Dataplane.Check)
// and, for PodNetworkNetns, the CNI plugins (build/cni/build.sh).
func Check(dp lab.Dataplane, pn PodNetwork) error {
	if _, err := controlplane.BinDir(); err != nil {
		return err
	}
	if pn == PodNetworkNetns {
		if _, err := podnet.BinDir(); err != nil {
			return fmt.Errorf("--pod-network netns: %w", err)
		}
	}
	if err := dp.Check(); err != nil {
		return fmt.Errorf("--dataplane %s: %w", dp, err)
	}
	return nil
}

// Reexec runs this pinlab command again, with the same arguments, in a new
// private network namespace (and user namespace when not root), and waits
// for it; listeners become its descriptors 3, 4, ... (sockets stay in the
// namespace they were bound in, so the copy inside accepts connections
// made on the host's loopback). It returns the command's exit code. verb
// names the command in errors ("lab up"). Ctrl-C reaches the child (same
// process group, and forwarded): Reexec waits for it to stop its control
// plane rather than kill it after a bound.
//
// The command inside keeps its temporary files (the control planes'
// state: keys, tokens, etcd's data, logs) in a session directory Reexec
// makes; Reexec removes what it leaves there but the logs the command
// inside said it kept. When a signal killed the command inside, the error
// is a *KilledError (the code 128 plus the signal's number). It first
// sweeps the sessions of commands that are gone (see sweep). While the
// command inside runs, the host does not route the lab's ranges off the
// machine (see hostRoutes); what it could not do there is said on notes
// (nil: nowhere), a line each.
func Reexec(ctx context.Context, verb string, notes io.Writer, listeners ...*os.File) (int, error) {
	sweep()
	sweepRoutes()
	s, err := newSession()
	if err != nil {
		return 0, err
	}
	routes, said := addHostRoutes()
	defer routes.remove()
	for _, n := range said {
		if notes != nil {
			fmt.Fprintf(notes, "%s: %s\n", verb, n)
		}
	}
	var killed syscall.Signal
	code, err := netns.Run(context.WithoutCancel(ctx), netns.Config{Args: os.Args[1:], ExtraFiles: listeners, Env: s.env(),
		Killed: func(sig syscall.Signal) { killed = sig }})
	logs := s.end()
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s --control-plane kubernetes: %w", verb, err)
	case killed != 0:
		return code, &KilledError{Verb: verb, Signal: killed, Logs: logs}
	}
	return code, nil
}

// Inherited is the listener the host side handed over at descriptor fd
// (Reexec's listeners start at 3); what names it in errors.
func Inherited(fd int, what string) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), what)
	if f == nil {
		return nil, fmt.Errorf("no %s listener handed over at descriptor %d", what, fd)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("the %s listener handed over at descriptor %d: %w", what, fd, err)
	}
	return ln, nil
}

// ListenerFile is ln's descriptor, for Reexec; the caller closes it.
func ListenerFile(ln net.Listener) (*os.File, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("kubelab: a %T cannot be handed over", ln)
	}
	return tl.File()
}

// subnet is the i-th /bits range inside p.
func subnet(p netip.Prefix, bits, i int) (netip.Prefix, error) {
	p = p.Masked()
	if !p.Addr().Is4() || bits < p.Bits() || bits > 32 || i < 0 || i >= 1<<(bits-p.Bits()) {
		return netip.Prefix{}, fmt.Errorf("no /%d number %d in %v", bits, i, p)
	}
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += uint32(i) << (32 - bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), bits), nil
}
