// Package endpoints turns the EndpointSlices of one Service port into the
// endpoints new connections or requests may use. It is the lab's one copy of
// kube-proxy's EndpointSliceCache (pkg/proxy/endpointslicecache.go) and of
// CategorizeEndpoints (pkg/proxy/topology.go), which in Kubernetes serve
// every proxy backend alike; internal/proxy (kube-proxy) and
// internal/l7proxy (a mesh proxy) use it and differ only in
// Filter.Headless.
package endpoints

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/loopback"
	discovery "k8s.io/api/discovery/v1"
)

// LabelHeadless marks the EndpointSlices of a headless Service
// (service.kubernetes.io/headless, set by the EndpointSlice controller).
const LabelHeadless = "service.kubernetes.io/headless"

// Endpoint is one endpoint of a Service port with its EndpointSlice
// conditions resolved.
type Endpoint struct {
	// Addr is the endpoint's first address (kube-proxy uses addresses[0]
	// only) with the number the slice gives the port.
	Addr netip.AddrPort
	// Pod is the targetRef's name when it refers to a Pod (kind "Pod" or
	// unset); "" otherwise.
	Pod string
	// Ready is conditions.ready; nil counts as true (discovery/v1).
	Ready bool
	// Serving is conditions.serving; nil takes Ready's value, as the
	// discovery/v1 doc said before it changed to "nil is true" (k8s.io/api
	// v0.37 reads so, and kube-proxy's cache takes nil as true). The two
	// differ only for ready=false with serving unset, which no controller
	// writes.
	Serving bool
	// Terminating is conditions.terminating; nil counts as false
	// (discovery/v1).
	Terminating bool
}

// Filter selects the endpoints of one Service port from the Service's
// EndpointSlices. The zero value selects the unnamed port's IPv4 endpoints
// in slices not labelled headless, inside the lab network.
type Filter struct {
	// Port is the Service port's name, which EndpointSlice ports carry; ""
	// for an unnamed port. Only TCP slice ports match (a nil or empty
	// protocol is TCP, as API defaulting makes it). A slice port with a nil
	// name matches "": the API server defaults a nil name to ""
	// (pkg/apis/discovery/v1/defaults.go), so kube-proxy, which skips nil
	// names, never sees one; the lab's store does not default it.
	Port string
	// Family is the addressType of the slices used, and the family their
	// addresses must have: discovery.AddressTypeIPv4 or AddressTypeIPv6.
	// "" means IPv4, the lab's family. kube-proxy keeps one cache per
	// family (NewEndpointSliceCache's ipFamily).
	Family discovery.AddressType
	// Headless makes slices labelled LabelHeadless count. false skips
	// them, as kube-proxy does (its informers select slices without the
	// label, cmd/kube-proxy/app/server.go); true suits a mesh proxy, which
	// routes to a headless Service's pods too.
	Headless bool
	// InLab reports whether traffic may go to an address. Endpoints
	// elsewhere are returned apart, so no traffic goes there. nil means
	// inside loopback.Prefix (127.0.0.0/8).
	InLab func(netip.Addr) bool
}

// Endpoints merges the endpoints that the slices ss give f's port, in the
// order of the slices sorted by name, then of each slice's endpoints. A
// slice counts if its addressType is f's family, it has a TCP port matching
// f.Port with a number in 1-65535, and (unless f.Headless) it is not
// labelled headless. An endpoint without a parsable address of the family
// is skipped; an address listed by several slices counts once, the first
// slice by name winning (kube-proxy de-duplicates by address:port too).
// Addresses outside the lab come back in outside, not in eps.
func (f Filter) Endpoints(ss []*discovery.EndpointSlice) (eps []Endpoint, outside []netip.AddrPort) {
	inLab := f.InLab
	if inLab == nil {
		inLab = func(a netip.Addr) bool { return loopback.CheckIP(a) == nil }
	}
	seen := map[netip.AddrPort]bool{}
	for _, s := range sortedByName(ss) {
		port, ok := f.port(s)
		if !ok {
			continue
		}
		for _, e := range s.Endpoints {
			ep, ok := f.endpoint(e, port)
			switch {
			case !ok || seen[ep.Addr]:
				continue
			case !inLab(ep.Addr.Addr()):
				outside = append(outside, ep.Addr)
			default:
				eps = append(eps, ep)
			}
			seen[ep.Addr] = true
		}
	}
	return eps, outside
}

// family is f.Family with its default.
func (f Filter) family() discovery.AddressType {
	if f.Family == "" {
		return discovery.AddressTypeIPv4
	}
	return f.Family
}

// port returns the number slice s gives f's port, if s counts.
func (f Filter) port(s *discovery.EndpointSlice) (uint16, bool) {
	if _, headless := s.Labels[LabelHeadless]; (headless && !f.Headless) || s.AddressType != f.family() {
		return 0, false
	}
	for _, p := range s.Ports {
		if name(p) != f.Port || p.Port == nil || (p.Protocol != nil && !IsTCP(*p.Protocol)) {
			continue
		}
		if n := *p.Port; n > 0 && n <= 65535 {
			return uint16(n), true
		}
	}
	return 0, false
}

// name is p's name, nil being "" as API defaulting makes it.
func name(p discovery.EndpointPort) string {
	if p.Name == nil {
		return ""
	}
	return *p.Name
}

// endpoint resolves e's first address and conditions; false if that
// address is not one of f's family.
func (f Filter) endpoint(e discovery.Endpoint, port uint16) (Endpoint, bool) {
	if len(e.Addresses) == 0 {
		return Endpoint{}, false
	}
	ip, ok := f.parse(e.Addresses[0])
	if !ok {
		return Endpoint{}, false
	}
	ep := Endpoint{Addr: netip.AddrPortFrom(ip, port)}
	if r := e.TargetRef; r != nil && (r.Kind == "" || r.Kind == "Pod") {
		ep.Pod = r.Name
	}
	c := e.Conditions
	ep.Ready = c.Ready == nil || *c.Ready
	ep.Serving = ep.Ready
	if c.Serving != nil {
		ep.Serving = *c.Serving
	}
	ep.Terminating = c.Terminating != nil && *c.Terminating
	return ep, true
}

// parse returns s as an address of f's family; an IPv4-mapped IPv6 address
// counts as IPv4.
func (f Filter) parse(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	if f.family() == discovery.AddressTypeIPv4 {
		return ip.Unmap(), ip.Unmap().Is4()
	}
	return ip, f.family() == discovery.AddressTypeIPv6 && ip.Is6() && !ip.Is4In6()
}

// Eligible returns the endpoints of eps a new connection or request may
// use, sorted by address, as CategorizeEndpoints (pkg/proxy/topology.go)
// decides for a Cluster traffic policy: the ready ones; if none is ready,
// those both serving and terminating (the graceful-termination fallback of
// KEP-1669, which Envoy's and Linkerd's EndpointSlice watchers apply too);
// else none.
func Eligible(eps []Endpoint) []Endpoint {
	out := keep(eps, func(e Endpoint) bool { return e.Ready })
	if len(out) == 0 {
		out = keep(eps, func(e Endpoint) bool { return e.Serving && e.Terminating })
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	return out
}

func keep(eps []Endpoint, ok func(Endpoint) bool) []Endpoint {
	var out []Endpoint
	for _, e := range eps {
		if ok(e) {
			out = append(out, e)
		}
	}
	return out
}

func sortedByName(ss []*discovery.EndpointSlice) []*discovery.EndpointSlice {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b *discovery.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return ss
}
