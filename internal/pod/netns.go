package pod

import (
	"context"
	"net"

	"github.com/pinlab/pinlab/internal/loopback"
)

// Netns is a pod's own network namespace (package podnet's Sandbox): Do
// runs f on an OS thread inside it, so the sockets f opens are the pod's.
// A nil Netns is the node's namespace, shared by every pod.
type Netns interface {
	Do(f func() error) error
}

// ContainerNetns is the Netns of a pod process that a real cluster's
// container runtime started (the pinlab image, cmd/pinlab-workload): the
// process's own namespace is the pod's, made by the runtime. Servers
// given it listen where Addr says, unspecified IPs included ("0.0.0.0:N"
// listens on every address of the pod, as kubectl port-forward, which
// dials the pod's localhost, and the pod IP both need), without package
// loopback's check: that check keeps the lab's sockets on this machine,
// and a container's sockets are the cluster's. Nothing in the lab uses
// it.
type ContainerNetns struct{}

// Do runs f in the process's own namespace.
func (ContainerNetns) Do(f func() error) error { return f() }

// listenIn opens a TCP listener on addr in namespace ns: in the node's
// when ns is nil, inside the ranges package loopback allows, except for
// a ContainerNetns, where any address is taken.
func listenIn(ctx context.Context, ns Netns, addr string) (net.Listener, error) {
	if _, ok := ns.(ContainerNetns); ok {
		var lc net.ListenConfig
		return lc.Listen(ctx, "tcp", addr)
	}
	if ns == nil {
		return loopback.Listen(ctx, addr)
	}
	var ln net.Listener
	err := ns.Do(func() error {
		var err error
		ln, err = loopback.Listen(ctx, addr)
		return err
	})
	return ln, err
}
