package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
)

// Address ranges: each lab on the embedded control plane takes one of
// Ranges loopback ranges, claimed machine-wide; on a real control plane the
// ranges are the API server's, and the node's and the DNS's addresses are
// taken from the pod range (NodeIP, DNSPodIP).

// Ranges is the number of address ranges, so the most labs that can run at
// once on one machine.
const Ranges = 12

// lockPort is the port a lab binds on its DNS address to claim its range
// against every other lab on the machine, in this process or another.
const lockPort = 10053

// claimRange binds the lock address of range r and returns the listener
// and the 0-based index. With r zero it takes the first free range, waiting
// (until ctx ends) while every range is in use by other labs.
func claimRange(ctx context.Context, r int, waiting func()) (net.Listener, int, error) {
	if r < 0 || r > Ranges {
		return nil, 0, fmt.Errorf("lab: range %d: want 1 to %d, or 0 for the first free one", r, Ranges)
	}
	if r > 0 {
		ln, err := loopback.Listen(ctx, lockAddr(r-1))
		if err != nil {
			return nil, 0, fmt.Errorf("lab: address range %d is in use by another lab: %w", r, err)
		}
		return ln, r - 1, nil
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		for i := range Ranges {
			if ln, err := loopback.Listen(ctx, lockAddr(i)); err == nil {
				return ln, i, nil
			}
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("lab: all %d address ranges stayed in use by other labs on this machine: %w", Ranges, ctx.Err())
		case <-t.C:
		}
	}
}

func lockAddr(i int) string {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(96 + i), 0, 10}), lockPort).String()
}

// NodeIP is the node's address on a real control plane: the last but one
// address of the pod range (10.244.255.254 in 10.244.0.0/16), to be the
// API server's advertised address too. It is the zero Addr for a range
// that is not IPv4 or holds fewer than 4 addresses.
func NodeIP(pods netip.Prefix) netip.Addr {
	p := pods.Masked()
	if !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Addr{}
	}
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= 1<<(32-p.Bits()) - 2
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// NodeRange is the top /23 of a pod range, which no pod gets when each
// pod has its own network namespace (API.PodNetwork): the node's own
// addresses, local to it, are there: NodeIP, DNSPodIP and those lab load
// dials from (10.244.254.N in 10.244.0.0/16).
func NodeRange(pods netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(NodeIP(pods), 23).Masked()
}

// DNSPodIP is the cluster DNS's address under the real kube-proxy: the
// last but two address of the pod range (10.244.255.253 in 10.244.0.0/16,
// beside the node's), reserved from the pods' addresses. It is the zero
// Addr for a range NodeIP refuses.
func DNSPodIP(pods netip.Prefix) netip.Addr {
	n := NodeIP(pods)
	if !n.IsValid() {
		return n
	}
	return n.Prev()
}
