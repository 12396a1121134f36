//go:build !linux

package pod

import (
	"context"
	"errors"
	"net/netip"
)

// Blackhole drops SYNs to one address; it is implemented on Linux only
// (see blackhole_linux.go for the mechanism).
type Blackhole struct{}

// NewBlackhole fails outside Linux.
func NewBlackhole(context.Context, netip.AddrPort, Netns) (*Blackhole, error) {
	return nil, errors.New("pod: blackholed addresses need Linux")
}

// Close does nothing.
func (*Blackhole) Close() error { return nil }
