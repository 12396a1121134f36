//go:build !linux

package podnet

import (
	"context"
	"net"
	"net/netip"
)

// Network is unavailable on this system.
type Network struct{}

// Sandbox is unavailable on this system.
type Sandbox struct {
	ID string
	IP netip.Addr
}

// New returns ErrUnsupported.
func New(Config) (*Network, error) { return nil, ErrUnsupported }

func (*Network) Add(context.Context, string, netip.Addr) (*Sandbox, error) {
	return nil, ErrUnsupported
}
func (*Network) Remove(context.Context, *Sandbox) error               { return ErrUnsupported }
func (*Network) Close() error                                         { return nil }
func (*Network) Local(netip.Addr) error                               { return ErrUnsupported }
func (*Sandbox) Do(func() error) error                                { return ErrUnsupported }
func (*Sandbox) Listen(context.Context, string) (net.Listener, error) { return nil, ErrUnsupported }
