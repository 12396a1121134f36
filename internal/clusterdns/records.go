package clusterdns

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

// maxChain bounds how many CNAMEs an in-zone ExternalName chase follows
// (CoreDNS stops adding once more than 7 are in the chain).
const maxChain = 7

// SOA timers of the zone (CoreDNS backend_lookup.go).
const (
	soaRefresh = 7200
	soaRetry   = 1800
	soaExpire  = 86400
	soaMaxTTL  = 300 // the SOA's own TTL is min(TTL, 300)
)

// resolve answers one in-zone question. RcodeSuccess with no answer is
// NODATA; the caller adds the negative SOA.
func (s *Server) resolve(q query) (rcode int, answer, extra []dns.RR) {
	answer, extra, err := s.lookup(q)
	if errors.Is(err, errNoName) {
		return dns.RcodeNameError, nil, nil
	}
	return dns.RcodeSuccess, answer, extra
}

// lookup dispatches on the question type, as CoreDNS's kubernetes handler
// does. Types without data of their own get a "fake A lookup" that only
// decides between NODATA and NXDOMAIN.
func (s *Server) lookup(q query) (answer, extra []dns.RR, err error) {
	if q.kind != clusterZone {
		return s.reverse(q)
	}
	switch q.qtype {
	case dns.TypeA, dns.TypeAAAA:
		answer, err = s.addresses(q, nil)
	case dns.TypeSRV:
		return s.srv(q)
	case dns.TypeCNAME:
		answer, err = s.cname(q)
	case dns.TypeTXT:
		answer, err = s.txt(q)
	case dns.TypeSOA:
		if q.isApex() {
			return []dns.RR{s.soa(q.zone)}, nil, nil
		}
		err = s.exists(q)
	case dns.TypeNS:
		if q.isApex() {
			return s.ns(q)
		}
		err = s.exists(q)
	default:
		err = s.exists(q)
	}
	return answer, extra, err
}

// exists returns errNoName if q's name does not exist, judged by an A lookup.
func (s *Server) exists(q query) error {
	_, err := s.addresses(q.withType(dns.TypeA), nil)
	return err
}

// backendsFor parses q's name by the grammar and resolves it.
func (s *Server) backendsFor(q query) ([]backend, error) {
	r, err := parseRequest(q.labels)
	if err != nil {
		return nil, err
	}
	return s.backends(r)
}

// addresses answers A or AAAA (q.qtype): addresses of q's family, one per
// IP, and ExternalName aliases chased. chain holds the CNAMEs already
// followed to get here.
func (s *Server) addresses(q query, chain []dns.RR) ([]dns.RR, error) {
	switch {
	case q.isApex():
		return nil, nil
	case q.isNSName():
		return s.nsAddresses(q), nil
	}
	bs, err := s.backendsFor(q)
	if err != nil {
		return nil, err
	}
	out := make([]dns.RR, 0, len(bs))
	alloc := s.newAddrAlloc(len(bs))
	seen := make(map[[16]byte]struct{}, len(bs))
	for _, b := range bs {
		if b.alias != "" {
			out = append(out, s.chase(q, b.alias, chain)...)
			continue
		}
		key := b.addr.As16()
		if _, dup := seen[key]; dup || !hasFamily(b.addr, q.qtype) {
			continue
		}
		seen[key] = struct{}{}
		out = append(out, alloc.rr(q.owner, b.addr))
	}
	return out, nil
}

// chase answers an ExternalName alias: the CNAME followed by the target's
// records when the target is in the zone (nothing at all if the target has
// none, as in CoreDNS), or the CNAME alone for an outside target, since
// there is no upstream to ask. Loops and long chains are cut.
func (s *Server) chase(q query, alias string, chain []dns.RR) []dns.RR {
	if strings.EqualFold(q.owner, alias) {
		return nil
	}
	cname := &dns.CNAME{Hdr: s.header(q.owner, dns.TypeCNAME), Target: alias}
	if len(chain) > maxChain || hasCNAME(chain, cname) {
		return nil
	}
	next, ok := s.inZone(alias, q.qtype)
	if !ok {
		return []dns.RR{cname}
	}
	rrs, err := s.addresses(next, append(slices.Clip(chain), cname))
	if err != nil || len(rrs) == 0 {
		return nil
	}
	return append([]dns.RR{cname}, rrs...)
}

func hasCNAME(chain []dns.RR, c *dns.CNAME) bool {
	for _, rr := range chain {
		prev, ok := rr.(*dns.CNAME)
		if ok && strings.EqualFold(prev.Hdr.Name, c.Hdr.Name) && strings.EqualFold(prev.Target, c.Target) {
			return true
		}
	}
	return false
}

// srv answers SRV: one record per distinct (target, port), priority 0 and
// weight floor(100/N) (at least 1) for N backends, with one address glue
// record per distinct (target, IP). ExternalName Services have none.
func (s *Server) srv(q query) (answer, extra []dns.RR, err error) {
	if q.isApex() || q.isNSName() {
		return nil, nil, nil
	}
	bs, err := s.backendsFor(q)
	if err != nil {
		return nil, nil, err
	}
	bs = slices.DeleteFunc(bs, func(b backend) bool { return b.alias != "" })
	if len(bs) == 0 {
		return nil, nil, nil
	}
	weight := uint16(max(1, 100/len(bs)))
	type srvKey struct {
		target string
		port   int32
	}
	type glueKey struct {
		target string
		addr   netip.Addr
	}
	seenSRV := make(map[srvKey]struct{}, len(bs))
	seenGlue := make(map[glueKey]struct{}, len(bs))
	for _, b := range bs {
		if b.port < 0 || b.port > math.MaxUint16 {
			continue
		}
		target := b.target(q.zone)
		if _, dup := seenSRV[srvKey{target, b.port}]; !dup {
			seenSRV[srvKey{target, b.port}] = struct{}{}
			answer = append(answer, &dns.SRV{
				Hdr: s.header(q.owner, dns.TypeSRV), Weight: weight, Port: uint16(b.port), Target: target,
			})
		}
		if _, dup := seenGlue[glueKey{target, b.addr}]; !dup {
			seenGlue[glueKey{target, b.addr}] = struct{}{}
			extra = append(extra, s.addressRR(target, b.addr))
		}
	}
	return answer, extra, nil
}

// cname answers CNAME for an ExternalName Service; other names that exist
// have no CNAME (NODATA).
func (s *Server) cname(q query) ([]dns.RR, error) {
	if q.isApex() || q.isNSName() {
		return nil, nil
	}
	bs, err := s.backendsFor(q)
	if err != nil || len(bs) == 0 || bs[0].alias == "" {
		return nil, err
	}
	return []dns.RR{&dns.CNAME{Hdr: s.header(q.owner, dns.TypeCNAME), Target: bs[0].alias}}, nil
}

// txt answers the schema version at dns-version.<zone>; any other name gets
// NODATA or NXDOMAIN.
func (s *Server) txt(q query) ([]dns.RR, error) {
	if !q.isVersionName() {
		return nil, s.exists(q)
	}
	hdr := s.header(q.owner, dns.TypeTXT)
	hdr.Ttl = versionTTL
	return []dns.RR{&dns.TXT{Hdr: hdr, Txt: []string{SchemaVersion}}}, nil
}

// soa is a zone's SOA, in answers at the apex and in the Authority
// section of negative answers. zone is the zone as the query spells it.
func (s *Server) soa(zone string) *dns.SOA {
	hdr := s.header(zone, dns.TypeSOA)
	hdr.Ttl = min(s.cfg.ttl, soaMaxTTL)
	return &dns.SOA{
		Hdr:     hdr,
		Ns:      join(zone, "ns", "dns"),
		Mbox:    join(zone, "hostmaster"),
		Serial:  s.store.changes.serial.Load(),
		Refresh: soaRefresh,
		Retry:   soaRetry,
		Expire:  soaExpire,
		Minttl:  s.cfg.ttl,
	}
}

// cachedSOA is the SOA of a zone spelled in lower case, for one serial.
type cachedSOA struct {
	rr     *dns.SOA
	serial uint32
	len    int
}

// negativeSOA returns the SOA for a negative answer in the zone of kind,
// spelled as in the query, and its uncompressed length. The lower-case
// spelling is built once per serial.
func (s *Server) negativeSOA(zone string, kind zoneKind) (*dns.SOA, int) {
	serial := s.store.changes.serial.Load()
	slot := &s.soas[kind]
	if c := slot.Load(); c != nil && c.serial == serial && c.rr.Hdr.Name == zone {
		return c.rr, c.len
	}
	rr := s.soa(zone)
	n := dns.Len(rr)
	if zone == s.cfg.zones[kind].name {
		slot.Store(&cachedSOA{rr: rr, serial: rr.Serial, len: n})
	}
	return rr, n
}

// ns answers NS at the apex: the name server with its addresses as glue.
// It is named in the cluster zone, spelled as in the query there.
func (s *Server) ns(q query) (answer, extra []dns.RR, err error) {
	zone := q.zone
	if q.kind != clusterZone {
		zone = s.cfg.zone
	}
	name, ips := s.nameServer(zone)
	answer = []dns.RR{&dns.NS{Hdr: s.header(q.owner, dns.TypeNS), Ns: name}}
	for _, ip := range ips {
		extra = append(extra, s.addressRR(name, ip))
	}
	return answer, extra, nil
}

// nsAddresses answers A/AAAA for ns.dns.<zone>: the name server addresses.
func (s *Server) nsAddresses(q query) []dns.RR {
	_, ips := s.nameServer(q.zone)
	var out []dns.RR
	for _, ip := range ips {
		if hasFamily(ip, q.qtype) {
			out = append(out, s.addressRR(q.owner, ip))
		}
	}
	return out
}

// nameServer names the zone's name server: the DNS Service and its
// ClusterIPs when it exists, else ns.dns.<zone> at the listen IP.
func (s *Server) nameServer(zone string) (string, []netip.Addr) {
	ref := s.cfg.dnsService
	svc := s.store.service(ref.Namespace, ref.Name)
	if svc != nil && svc.Spec.Type != corev1.ServiceTypeExternalName && !isHeadless(svc) {
		if ips := clusterIPs(svc); len(ips) > 0 {
			return join(zone, svc.Name, svc.Namespace, svcLabel), ips
		}
	}
	return join(zone, "ns", "dns"), []netip.Addr{s.cfg.addr.Addr()}
}

func hasFamily(ip netip.Addr, qtype uint16) bool {
	if ip.Is4() {
		return qtype == dns.TypeA
	}
	return qtype == dns.TypeAAAA
}

func (s *Server) addressRR(owner string, ip netip.Addr) dns.RR {
	if ip.Is4() {
		return &dns.A{Hdr: s.header(owner, dns.TypeA), A: ip.AsSlice()}
	}
	return &dns.AAAA{Hdr: s.header(owner, dns.TypeAAAA), AAAA: ip.AsSlice()}
}

func (s *Server) header(owner string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: rrtype, Class: dns.ClassINET, Ttl: s.cfg.ttl}
}
