package clusterdns

import (
	"math/rand/v2"

	"github.com/miekg/dns"
)

// shuffle reorders rrs in place like CoreDNS's loadbalance plugin: CNAMEs
// first, then other records in their order, then the A and AAAA records in
// random order. Unlike loadbalance, whose swaps are not uniform, the
// addresses get a uniform (Fisher-Yates) permutation.
func (s *Server) shuffle(rrs []dns.RR) {
	if tail, ok := addressTail(rrs); ok {
		s.permute(tail)
		return
	}
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
	s.permute(addrs)
	n := copy(rrs, cnames)
	n += copy(rrs[n:], rest)
	copy(rrs[n:], addrs)
}

// addressTail returns the address records of rrs if they all come after
// every other record and the CNAMEs lead, the order shuffle produces; then
// only they need shuffling, in place.
func addressTail(rrs []dns.RR) ([]dns.RR, bool) {
	k := 0
	for k < len(rrs) && rrs[k].Header().Rrtype == dns.TypeCNAME {
		k++
	}
	for k < len(rrs) && !isAddress(rrs[k]) {
		if rrs[k].Header().Rrtype == dns.TypeCNAME {
			return nil, false
		}
		k++
	}
	for _, rr := range rrs[k:] {
		if !isAddress(rr) {
			return nil, false
		}
	}
	return rrs[k:], true
}

func isAddress(rr dns.RR) bool {
	t := rr.Header().Rrtype
	return t == dns.TypeA || t == dns.TypeAAAA
}

// permute shuffles rrs uniformly (Fisher-Yates) with Config.Rand, or the
// global source when it is nil.
func (s *Server) permute(rrs []dns.RR) {
	intN := rand.IntN
	if s.cfg.rand != nil {
		s.randMu.Lock()
		defer s.randMu.Unlock()
		intN = s.cfg.rand.IntN
	}
	for i := len(rrs) - 1; i > 0; i-- {
		j := intN(i + 1)
		rrs[i], rrs[j] = rrs[j], rrs[i]
	}
}
