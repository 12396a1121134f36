package clusterdns

import (
	"net/netip"

	"github.com/miekg/dns"
)

// addrAlloc makes up to n address records from three allocations instead
// of two per record, which matters for Services with many endpoints.
type addrAlloc struct {
	s    *Server
	n    int
	a    []dns.A
	aaaa []dns.AAAA
	ips  []byte
}

func (s *Server) newAddrAlloc(n int) *addrAlloc { return &addrAlloc{s: s, n: n} }

// rr returns the A or AAAA record of ip owned by owner.
func (p *addrAlloc) rr(owner string, ip netip.Addr) dns.RR {
	if ip.Is4() {
		if p.a == nil {
			p.a = make([]dns.A, 0, p.n)
		}
		a4 := ip.As4()
		p.a = append(p.a, dns.A{Hdr: p.s.header(owner, dns.TypeA), A: p.take(a4[:])})
		return &p.a[len(p.a)-1]
	}
	if p.aaaa == nil {
		p.aaaa = make([]dns.AAAA, 0, p.n)
	}
	a16 := ip.As16()
	p.aaaa = append(p.aaaa, dns.AAAA{Hdr: p.s.header(owner, dns.TypeAAAA), AAAA: p.take(a16[:])})
	return &p.aaaa[len(p.aaaa)-1]
}

// take copies b into the shared buffer and returns the copy, capped so an
// append by a later user cannot overwrite its neighbour.
func (p *addrAlloc) take(b []byte) []byte {
	if cap(p.ips)-len(p.ips) < len(b) {
		p.ips = make([]byte, 0, max(16*p.n, len(b)))
	}
	start := len(p.ips)
	p.ips = append(p.ips, b...)
	return p.ips[start:len(p.ips):len(p.ips)]
}
