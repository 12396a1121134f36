package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
)

// ErrFull is returned when a range has no free address left.
var ErrFull = errors.New("cluster: address range is full")

// IPAM hands out addresses from one IPv4 prefix. The network address and the
// first host address (the "gateway", as host-local IPAM reserves it) are
// never handed out. Safe for concurrent use.
type IPAM struct {
	prefix netip.Prefix
	first  netip.Addr
	last   netip.Addr
	size   int

	mu   sync.Mutex
	used map[netip.Addr]bool
	next netip.Addr
}

// NewIPAM returns an allocator for prefix, which must be IPv4 and no longer
// than /30.
func NewIPAM(prefix netip.Prefix) (*IPAM, error) {
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("cluster: %v is not an IPv4 range of at least 4 addresses", prefix)
	}
	hosts := 1<<(32-prefix.Bits()) - 1 // excludes the network address
	first := prefix.Addr().Next().Next()
	last := first
	for i := 0; i < hosts-3; i++ { // excludes gateway and broadcast
		last = last.Next()
	}
	return &IPAM{prefix: prefix, first: first, last: last, size: hosts - 2, used: map[netip.Addr]bool{}, next: first}, nil
}

// Prefix returns the range.
func (a *IPAM) Prefix() netip.Prefix { return a.prefix }

// Allocate returns the next free address after the last one handed out,
// wrapping around, as CNI host-local IPAM does.
func (a *IPAM) Allocate() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ip := a.next
	for i := 0; i < a.size; i++ {
		cand := ip
		ip = ip.Next()
		if ip.Compare(a.last) > 0 {
			ip = a.first
		}
		if !a.used[cand] {
			a.used[cand] = true
			a.next = ip
			return cand, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: %v", ErrFull, a.prefix)
}

// AllocateRandom returns a free address chosen uniformly at random, as the
// API server's ClusterIP allocator does.
func (a *IPAM) AllocateRandom(r *rand.Rand) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.used) >= a.size {
		return netip.Addr{}, fmt.Errorf("%w: %v", ErrFull, a.prefix)
	}
	base := a.first.As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for {
		v := start + uint32(r.IntN(a.size))
		ip := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		if !a.used[ip] {
			a.used[ip] = true
			return ip, nil
		}
	}
}

// Reserve marks ip as used; it fails if ip is outside the range or taken.
func (a *IPAM) Reserve(ip netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.prefix.Contains(ip) || ip.Compare(a.first) < 0 || ip.Compare(a.last) > 0 {
		return fmt.Errorf("cluster: %v is not a usable address of %v", ip, a.prefix)
	}
	if a.used[ip] {
		return fmt.Errorf("cluster: %v is already allocated", ip)
	}
	a.used[ip] = true
	return nil
}

// Release frees ip; releasing a free address does nothing.
func (a *IPAM) Release(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
}

// InUse returns how many addresses are allocated.
func (a *IPAM) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}
