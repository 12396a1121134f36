package l7proxy

import (
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// target is one endpoint of the routed Service port as its EndpointSlices
// show it, with the conditions resolved: nil ready counts as true, nil
// serving defers to ready (the discovery/v1 API doc), nil terminating is
// false. These are internal/proxy's conventions, which follow kube-proxy.
type target struct {
	addr                        netip.AddrPort
	pod                         string // targetRef name; "" without a Pod reference
	ready, serving, terminating bool
}

// targets merges the endpoints of all slices for the Service port named
// portName, as kube-proxy's EndpointSliceCache does: a slice contributes only
// if its addressType is IPv4 and it has a TCP port with exactly that name and
// a valid number; each endpoint's first address is used; an address listed
// by several slices counts once (the first slice by name wins). Endpoints
// outside the lab network come back in outside: no traffic goes there.
// Slices labelled headless are used too: unlike kube-proxy, a mesh proxy
// routes to a headless Service's pods.
func targets(ss []*discovery.EndpointSlice, portName string, inLab func(netip.Addr) bool) (ts []target, outside []netip.AddrPort) {
	seen := map[netip.AddrPort]bool{}
	for _, s := range sortedByName(ss) {
		port, ok := slicePort(s, portName)
		if !ok {
			continue
		}
		for _, e := range s.Endpoints {
			t, ok := toTarget(e, port)
			switch {
			case !ok || seen[t.addr]:
				continue
			case !inLab(t.addr.Addr()):
				outside = append(outside, t.addr)
			default:
				ts = append(ts, t)
			}
			seen[t.addr] = true
		}
	}
	return ts, outside
}

// slicePort returns the number slice s gives the port named portName, if s
// is an IPv4 slice with such a TCP port.
func slicePort(s *discovery.EndpointSlice, portName string) (uint16, bool) {
	if s.AddressType != discovery.AddressTypeIPv4 {
		return 0, false
	}
	for _, p := range s.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != portName || p.Port == nil || (p.Protocol != nil && !isTCP(*p.Protocol)) {
			continue
		}
		if n := *p.Port; n > 0 && n <= 65535 {
			return uint16(n), true
		}
	}
	return 0, false
}

// isTCP reports whether p is TCP; the empty protocol is TCP, as API
// defaulting makes it (fake clientsets do not default).
func isTCP(p v1.Protocol) bool { return p == "" || p == v1.ProtocolTCP }

// toTarget resolves e's first address and conditions; false if e has no
// usable IPv4 address.
func toTarget(e discovery.Endpoint, port uint16) (target, bool) {
	if len(e.Addresses) == 0 {
		return target{}, false
	}
	ip, err := netip.ParseAddr(e.Addresses[0])
	if err != nil || !ip.Unmap().Is4() {
		return target{}, false
	}
	t := target{addr: netip.AddrPortFrom(ip.Unmap(), port)}
	if r := e.TargetRef; r != nil && (r.Kind == "" || r.Kind == "Pod") {
		t.pod = r.Name
	}
	c := e.Conditions
	t.ready = c.Ready == nil || *c.Ready
	t.serving = t.ready
	if c.Serving != nil {
		t.serving = *c.Serving
	}
	t.terminating = c.Terminating != nil && *c.Terminating
	return t, true
}

// eligible returns the targets new requests may use, sorted by address: the
// ready ones; if there are none, those both serving and terminating (the
// graceful-termination fallback of KEP-1669, as kube-proxy's
// CategorizeEndpoints and Envoy's and Linkerd's EndpointSlice watchers
// apply it); else none.
func eligible(ts []target) []target {
	out := keep(ts, func(t target) bool { return t.ready })
	if len(out) == 0 {
		out = keep(ts, func(t target) bool { return t.serving && t.terminating })
	}
	slices.SortFunc(out, func(a, b target) int { return a.addr.Compare(b.addr) })
	return out
}

func keep(ts []target, ok func(target) bool) []target {
	var out []target
	for _, t := range ts {
		if ok(t) {
			out = append(out, t)
		}
	}
	return out
}

func sortedByName(ss []*discovery.EndpointSlice) []*discovery.EndpointSlice {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b *discovery.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return ss
}

// servicePortName maps a Service port number to its name (the key
// EndpointSlice ports carry), as kube-proxy matches a ServicePort to slice
// ports; false if svc has no TCP port with that number.
func servicePortName(svc *v1.Service, number int32) (string, bool) {
	for _, p := range svc.Spec.Ports {
		if p.Port == number && isTCP(p.Protocol) {
			return p.Name, true
		}
	}
	return "", false
}
