package proxy

import (
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
)

// picker chooses the endpoint for one new connection, as the Service chain of
// a kube-proxy mode does for a conntrack NEW packet. eps is never empty and is
// sorted by address. Each VIP has its own picker, used by one goroutine at a
// time (the VIP's accept loop), so implementations need no locking. IPVS
// round-robin or sessionAffinity ClientIP would be siblings of randomPicker.
type picker interface {
	pick(client netip.Addr, eps []Endpoint) Endpoint
}

// randomPicker gives every endpoint probability exactly 1/n per connection,
// like the iptables chain of `statistic --mode random --probability 1/(n-i)`
// rules and nftables `numgen random mod n`.
type randomPicker struct{ rng *rand.Rand }

func (r randomPicker) pick(_ netip.Addr, eps []Endpoint) Endpoint {
	return eps[r.rng.IntN(len(eps))]
}

// newRandomPicker returns the picker for vip. With seed 0 the stream is
// randomly seeded; otherwise it is derived from seed and vip, so each VIP's
// sequence of picks is reproducible across runs whatever other VIPs do.
func newRandomPicker(seed uint64, vip netip.AddrPort) randomPicker {
	if seed == 0 {
		return randomPicker{rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	}
	h := fnv.New64a()
	h.Write([]byte(vip.String()))
	return randomPicker{rand.New(rand.NewPCG(seed, h.Sum64()))}
}
