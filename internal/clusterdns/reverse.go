package clusterdns

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// reverse answers a question in in-addr.arpa. or ip6.arpa., as CoreDNS's
// Reverse does when the kubernetes plugin is authoritative for them:
//
//   - the apex has the zone's SOA and NS and no other data;
//   - <address>.in-addr.arpa. (four decimal labels) or ip6.arpa. (32
//     nibbles) has PTR records when a Service or ready endpoint has the
//     address (see ptrTargets), and is NXDOMAIN otherwise, since there is
//     no upstream to fall through to;
//   - such a name that exists answers NODATA for other types, and so does
//     a shorter name above an address that has PTR records (an empty
//     non-terminal, RFC 8020); every other name is NXDOMAIN.
func (s *Server) reverse(q query) (answer, extra []dns.RR, err error) {
	if q.isApex() {
		switch q.qtype {
		case dns.TypeSOA:
			return []dns.RR{s.soa(q.zone)}, nil, nil
		case dns.TypeNS:
			return s.ns(q)
		}
		return nil, nil, nil
	}
	prefix, ok := reversePrefix(q.kind, q.labels)
	switch {
	case !ok:
		return nil, nil, errNoName
	case !prefix.IsSingleIP():
		if !s.anyPTRIn(prefix) {
			return nil, nil, errNoName
		}
		return nil, nil, nil
	}
	targets := s.ptrTargets(prefix.Addr())
	if len(targets) == 0 {
		return nil, nil, errNoName
	}
	if q.qtype != dns.TypePTR {
		return nil, nil, nil
	}
	for _, t := range targets {
		answer = append(answer, &dns.PTR{Hdr: s.header(q.owner, dns.TypePTR), Ptr: t})
	}
	return answer, nil, nil
}

// reversePrefix reads the lower-case labels of a name below a reverse
// zone, leftmost first, as the prefix they stand for: four decimal labels
// (0-255, no leading zero) under in-addr.arpa. or 32 hex nibbles under
// ip6.arpa. make a single address; fewer make a shorter prefix.
func reversePrefix(kind zoneKind, ls []string) (netip.Prefix, bool) {
	var b [16]byte
	per, maxLabels := 8, 4
	if kind == reverseV6 {
		per, maxLabels = 4, 32
	}
	if len(ls) > maxLabels {
		return netip.Prefix{}, false
	}
	for i := range ls {
		v, ok := reverseLabel(ls[len(ls)-1-i], kind)
		if !ok {
			return netip.Prefix{}, false
		}
		bit := i * per
		b[bit/8] |= v << (8 - per - bit%8)
	}
	ip := netip.AddrFrom16(b)
	if kind == reverseV4 {
		ip = netip.AddrFrom4([4]byte(b[:4]))
	}
	p, err := ip.Prefix(len(ls) * per)
	return p, err == nil
}

// reverseLabel reads one label: a decimal octet for in-addr.arpa., a hex
// nibble for ip6.arpa.
func reverseLabel(l string, kind zoneKind) (byte, bool) {
	if kind == reverseV6 {
		v, err := strconv.ParseUint(l, 16, 4)
		return byte(v), err == nil && len(l) == 1
	}
	v, err := strconv.ParseUint(l, 10, 8)
	return byte(v), err == nil && (len(l) == 1 || l[0] != '0')
}

// ptrTargets names what has address ip, as CoreDNS's serviceRecordForIP
// does: the Service whose ClusterIP it is, alone; otherwise
// <label>.<svc>.<ns>.svc.<zone> for each ready endpoint with the address
// in each Service (headless or not), without repeats. Names use the
// configured zone in lower case. Endpoints of Services that no longer
// exist, or of ExternalName Services, are skipped: their forward names do
// not exist either.
func (s *Server) ptrTargets(ip netip.Addr) []string {
	if svc := s.store.serviceWithIP(ip); svc != nil {
		return []string{join(s.cfg.zone, svc.Name, svc.Namespace, svcLabel)}
	}
	var out []string
	for _, es := range s.store.slicesWithAddr(ip) {
		svc := s.store.service(es.Namespace, es.Labels[discoveryv1.LabelServiceName])
		if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		for _, ep := range es.Endpoints {
			out = appendEndpointTargets(out, s.cfg.zone, svc, ep, ip)
		}
	}
	return out
}

func appendEndpointTargets(out []string, zone string, svc *corev1.Service, ep discoveryv1.Endpoint, ip netip.Addr) []string {
	if !isReady(ep) {
		return out
	}
	for _, a := range ep.Addresses {
		if addr, err := netip.ParseAddr(a); err != nil || addr != ip {
			continue
		}
		t := join(zone, endpointLabel(ep.Hostname, a), svc.Name, svc.Namespace, svcLabel)
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// anyPTRIn reports whether some address in prefix has PTR records.
func (s *Server) anyPTRIn(prefix netip.Prefix) bool {
	for _, a := range s.store.addrsIndexed() {
		ip, err := netip.ParseAddr(a)
		if err == nil && prefix.Contains(ip) && len(s.ptrTargets(ip)) > 0 {
			return true
		}
	}
	return false
}
