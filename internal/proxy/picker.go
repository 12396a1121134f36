package proxy

import (
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
)

// picker chooses the endpoint for one new connection, as a mode's Service
// chain (or IPVS scheduler) does for a conntrack NEW packet, without regard to
// the client: ClientIP affinity is layered on top (affinity.go). eps is never
// empty and is sorted by address; the slice of one table is never modified,
// so implementations may recognise it by identity. Each VIP has its own
// picker, used by one goroutine at a time (the VIP's accept loop, or the Run
// goroutine while no accept loop runs), so implementations need no locking.
type picker interface {
	pick(eps []Endpoint) Endpoint
}

// rotationResetter is a picker whose position is lost when its VIP has no
// endpoints left, as an IPVS virtual service's real-server list empties.
type rotationResetter interface {
	reset()
}

// newPicker returns the picker of mode for vip.
func newPicker(mode Mode, seed uint64, vip netip.AddrPort) picker {
	if mode == ModeIPVS {
		return newRoundRobin()
	}
	return newRandomPicker(seed, vip)
}

// randomPicker gives every endpoint probability exactly 1/n per connection,
// like the iptables chain of `statistic --mode random --probability 1/(n-i)`
// rules and nftables `numgen random mod n`.
type randomPicker struct{ rng *rand.Rand }

func (r randomPicker) pick(eps []Endpoint) Endpoint {
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

// sameSlice reports whether a and b are the same slice (not merely equal).
func sameSlice(a, b []Endpoint) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
