package clusterdns

import (
	"math/rand/v2"
	"sync"

	"github.com/miekg/dns"
)

// The address shuffle follows CoreDNS's loadbalance plugin: CNAMEs first,
// then other records in their order, then the A and AAAA records in random
// order. Unlike loadbalance, whose swaps are not uniform, the addresses
// get a uniform (Fisher-Yates) permutation. Answers are built in that
// order already (see loadbalanceOrder), so a reply only permutes the
// address records at the end.

// loadbalanceOrder reorders rrs in place, stably, as CNAMEs, other records,
// then addresses, and returns the index of the first address.
func loadbalanceOrder(rrs []dns.RR) int {
	var cnames, rest, addrs []dns.RR
	for _, rr := range rrs {
		switch {
		case rr.Header().Rrtype == dns.TypeCNAME:
			cnames = append(cnames, rr)
		case isAddress(rr):
			addrs = append(addrs, rr)
		default:
			rest = append(rest, rr)
		}
	}
	n := copy(rrs, cnames)
	n += copy(rrs[n:], rest)
	copy(rrs[n:], addrs)
	return n
}

func isAddress(rr dns.RR) bool {
	t := rr.Header().Rrtype
	return t == dns.TypeA || t == dns.TypeAAAA
}

// shuffleInto copies rrs into out, of the same length, with the records
// from tail on in random order; rrs itself is not modified.
func (s *Server) shuffleInto(out, rrs []dns.RR, tail int) {
	copy(out, rrs[:tail])
	intN, unlock := s.intN()
	defer unlock()
	// Fisher-Yates "inside-out": each record lands in a random slot of
	// the ones filled so far, whose occupant moves to the end.
	dst := out[tail:]
	for i, rr := range rrs[tail:] {
		j := intN(i + 1)
		dst[i] = dst[j]
		dst[j] = rr
	}
}

// shuffleInPlace puts the records of rrs from tail on in random order.
func (s *Server) shuffleInPlace(rrs []dns.RR, tail int) {
	intN, unlock := s.intN()
	defer unlock()
	addrs := rrs[tail:]
	for i := len(addrs) - 1; i > 0; i-- {
		j := intN(i + 1)
		addrs[i], addrs[j] = addrs[j], addrs[i]
	}
}

// intN returns the random source: Config.Rand, locked until unlock is
// called, or math/rand/v2's global source.
func (s *Server) intN() (intN func(int) int, unlock func()) {
	if s.cfg.rand == nil {
		return rand.IntN, func() {}
	}
	s.randMu.Lock()
	return s.cfg.rand.IntN, s.randMu.Unlock
}

// Pools of replies and record slices, for writers that are done with a
// reply once WriteMsg returns.
var (
	msgPool = sync.Pool{New: func() any { return new(dns.Msg) }}
	rrPool  = sync.Pool{New: func() any { return new([]dns.RR) }}
)

// scratch hands out the reply and the record slices of one query: pooled
// ones, given back by release, or fresh ones.
type scratch struct {
	pool  bool
	m     *dns.Msg
	taken [2]*[]dns.RR // answer and additional
	n     int
}

// msg returns an empty reply.
func (sc *scratch) msg() *dns.Msg {
	if !sc.pool {
		return new(dns.Msg)
	}
	sc.m = msgPool.Get().(*dns.Msg)
	return sc.m
}

// slice returns a slice of n records without spare capacity.
func (sc *scratch) slice(n int) []dns.RR {
	if !sc.pool || sc.n == len(sc.taken) {
		return make([]dns.RR, n)
	}
	p := rrPool.Get().(*[]dns.RR)
	if cap(*p) < n {
		*p = make([]dns.RR, n)
	}
	sc.taken[sc.n] = p
	sc.n++
	return (*p)[:n:n]
}

// release returns the pooled reply and slices; they must no longer be in
// use. The reply keeps the array of its question section.
func (sc *scratch) release() {
	for _, p := range sc.taken[:sc.n] {
		rrPool.Put(p)
	}
	if sc.m != nil {
		*sc.m = dns.Msg{Question: sc.m.Question[:0]}
		msgPool.Put(sc.m)
	}
}
