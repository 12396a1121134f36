package proxy

import (
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// Labels kube-proxy filters on (pkg/proxy/apis, cmd/kube-proxy server setup):
// it watches neither Services claimed by another proxy nor headless slices.
const (
	labelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	labelHeadless         = "service.kubernetes.io/headless"
)

// Endpoint is one backend of a Service port: the address a KUBE-SEP chain
// would DNAT to, and the pod named by the EndpointSlice targetRef ("" when the
// endpoint has no Pod reference).
type Endpoint struct {
	Addr netip.AddrPort
	Pod  string
}

// candidate is an Endpoint with its EndpointSlice conditions resolved: nil
// ready counts as true, nil terminating as false, and nil serving defers to
// ready as the discovery/v1 API documents (kube-proxy's EndpointSliceCache
// takes nil serving as true; the two differ only for ready=false with serving
// unset, which no controller writes).
type candidate struct {
	Endpoint
	ready, serving, terminating bool
}

// clusterIPv4 returns the IPv4 ClusterIP that kube-proxy would program for
// svc, or false for headless ("None") and ExternalName Services, Services
// without an IPv4 ClusterIP, and Services claimed by another proxy through
// the service-proxy-name label.
func clusterIPv4(svc *v1.Service) (netip.Addr, bool) {
	if _, claimed := svc.Labels[labelServiceProxyName]; claimed || svc.Spec.Type == v1.ServiceTypeExternalName {
		return netip.Addr{}, false
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Unmap().Is4() {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// isTCP reports whether p is TCP; the empty protocol is TCP, as API defaulting
// makes it (fake clientsets do not default).
func isTCP(p v1.Protocol) bool { return p == "" || p == v1.ProtocolTCP }

// candidates merges the endpoints of all slices for the Service port named
// portName. A slice contributes only if its addressType is IPv4, it is not
// labelled headless and it has a TCP port with exactly that name and a valid
// number; each endpoint's first address is used and duplicates across slices
// are merged (the first slice by name wins). Endpoints outside the loopback
// prefix are returned separately in outside: the lab never sends traffic there.
func candidates(slices []*discovery.EndpointSlice, portName string, inLab func(netip.Addr) bool) (cands []candidate, outside []netip.AddrPort) {
	seen := map[netip.AddrPort]bool{}
	for _, s := range sortedByName(slices) {
		port, ok := targetPort(s, portName)
		if !ok {
			continue
		}
		for _, e := range s.Endpoints {
			c, ok := toCandidate(e, port)
			switch {
			case !ok || seen[c.Addr]:
				continue
			case !inLab(c.Addr.Addr()):
				outside = append(outside, c.Addr)
			default:
				cands = append(cands, c)
			}
			seen[c.Addr] = true
		}
	}
	return cands, outside
}

// targetPort returns the port number slice s gives the Service port named
// portName, if s is a usable IPv4 slice with such a TCP port.
func targetPort(s *discovery.EndpointSlice, portName string) (uint16, bool) {
	if _, headless := s.Labels[labelHeadless]; headless || s.AddressType != discovery.AddressTypeIPv4 {
		return 0, false
	}
	for _, p := range s.Ports {
		if p.Name == nil || *p.Name != portName || p.Port == nil {
			continue
		}
		if p.Protocol != nil && !isTCP(*p.Protocol) {
			continue
		}
		if n := *p.Port; n > 0 && n <= 65535 {
			return uint16(n), true
		}
	}
	return 0, false
}

// toCandidate resolves e's first address and conditions; false if e has no
// usable IPv4 address.
func toCandidate(e discovery.Endpoint, port uint16) (candidate, bool) {
	if len(e.Addresses) == 0 {
		return candidate{}, false
	}
	ip, err := netip.ParseAddr(e.Addresses[0])
	if err != nil || !ip.Unmap().Is4() {
		return candidate{}, false
	}
	c := candidate{Endpoint: Endpoint{Addr: netip.AddrPortFrom(ip.Unmap(), port)}}
	if r := e.TargetRef; r != nil && (r.Kind == "" || r.Kind == "Pod") {
		c.Pod = r.Name
	}
	cond := e.Conditions
	c.ready = cond.Ready == nil || *cond.Ready
	c.serving = c.ready // nil serving defers to ready (discovery/v1 API doc)
	if cond.Serving != nil {
		c.serving = *cond.Serving
	}
	c.terminating = cond.Terminating != nil && *cond.Terminating
	return c, true
}

// eligible returns the endpoints a new connection may use, sorted by address,
// as pkg/proxy/topology.go CategorizeEndpoints decides for a Cluster traffic
// policy: the ready ones; if there are none, those both serving and
// terminating (the graceful-termination fallback of KEP-1669); else none.
func eligible(cands []candidate) []Endpoint {
	eps := pick(cands, func(c candidate) bool { return c.ready })
	if len(eps) == 0 {
		eps = pick(cands, func(c candidate) bool { return c.serving && c.terminating })
	}
	slices.SortFunc(eps, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	return eps
}

func pick(cands []candidate, keep func(candidate) bool) []Endpoint {
	var eps []Endpoint
	for _, c := range cands {
		if keep(c) {
			eps = append(eps, c.Endpoint)
		}
	}
	return eps
}

func sortedByName(s []*discovery.EndpointSlice) []*discovery.EndpointSlice {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b *discovery.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return s
}
