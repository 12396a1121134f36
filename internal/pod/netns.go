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

// listenIn opens a TCP listener on addr (inside the ranges package
// loopback allows) in namespace ns, or in the node's when ns is nil.
func listenIn(ctx context.Context, ns Netns, addr string) (net.Listener, error) {
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
