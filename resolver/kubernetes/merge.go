package kubernetes

import (
	"cmp"
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// entry is one address to publish and what its slice said about it.
type entry struct {
	addr string // ip:port
	info *EndpointInfo
}

// tally counts what a merge saw, for the message that explains an empty
// result.
type tally struct {
	slices    int // slices of the Service with IP addresses
	endpoints int // their endpoints (a duplicate counts each time)
	// ready, terminating (serving and terminating) and notReady split
	// endpoints; noPort counts those in slices without the target's port.
	ready, terminating, notReady, noPort int
	// ports are the port names of slices without the target's port.
	ports []string
	// fallback is true when the result holds serving and terminating
	// endpoints because none was ready.
	fallback bool
}

// merge turns all of a Service's EndpointSlices into one address list,
// sorted by address, each address once: an IP in several slices (while the
// controller moves it) counts as ready if any copy is, as kube-proxy's
// endpointslicecache. Only the first of an endpoint's addresses is used
// (discovery/v1 defines no meaning for the others; kube-proxy ignores
// them). Slices of addressType FQDN are skipped. Ready endpoints are
// published; with fallback, and only when none is ready, the serving and
// terminating ones are, as kube-proxy does for a Service whose endpoints
// are all terminating (KEP-1669).
func merge(eps []*discoveryv1.EndpointSlice, t target, fallback bool) ([]entry, tally) {
	var tl tally
	ready, terminating := map[string]*EndpointInfo{}, map[string]*EndpointInfo{}
	for _, s := range eps {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		tl.slices++
		port, ok := slicePort(s, t)
		if !ok {
			tl.noPort += len(s.Endpoints)
			tl.endpoints += len(s.Endpoints)
			tl.ports = append(tl.ports, portNames(s)...)
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			tl.endpoints++
			addr := net.JoinHostPort(e.Addresses[0], port)
			info := infoOf(e)
			switch {
			case isReady(e.Conditions):
				tl.ready++
				ready[addr] = info
			case info.Serving && info.Terminating:
				tl.terminating++
				terminating[addr] = info
			default:
				tl.notReady++
			}
		}
	}
	pick := ready
	if len(ready) == 0 && fallback && len(terminating) > 0 {
		pick, tl.fallback = terminating, true
	}
	out := make([]entry, 0, len(pick))
	for a, i := range pick {
		out = append(out, entry{addr: a, info: i})
	}
	slices.SortFunc(out, func(a, b entry) int { return cmp.Compare(a.addr, b.addr) })
	slices.Sort(tl.ports)
	tl.ports = slices.Compact(tl.ports)
	return out, tl
}

// slicePort returns the port a slice's endpoints are dialled on: the
// target's number as is (as kuberesolver and a dns:/// target do), the
// slice port whose name is the target's port name, or, for a target
// without a port, the slice's first port. Slices of one Service may map a
// name to different numbers (pods of two templates), hence per slice.
func slicePort(s *discoveryv1.EndpointSlice, t target) (string, bool) {
	if t.number > 0 {
		return strconv.Itoa(t.number), true
	}
	for _, p := range s.Ports {
		if p.Port == nil {
			continue
		}
		if t.port == "" || p.Name != nil && *p.Name == t.port {
			return strconv.Itoa(int(*p.Port)), true
		}
	}
	return "", false
}

func portNames(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name != "" {
			out = append(out, *p.Name)
		}
	}
	return out
}

// isReady reads the ready condition, nil meaning true (discovery/v1).
// sercand/kuberesolver reads nil as not ready.
func isReady(c discoveryv1.EndpointConditions) bool { return c.Ready == nil || *c.Ready }

func infoOf(e discoveryv1.Endpoint) *EndpointInfo {
	i := &EndpointInfo{
		Serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
		Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
	}
	if e.Zone != nil {
		i.Zone = *e.Zone
	}
	if e.NodeName != nil {
		i.NodeName = *e.NodeName
	}
	if e.Hostname != nil {
		i.Hostname = *e.Hostname
	}
	if h := e.Hints; h != nil {
		for _, z := range h.ForZones {
			i.ForZones = append(i.ForZones, z.Name)
		}
		for _, n := range h.ForNodes {
			i.ForNodes = append(i.ForNodes, n.Name)
		}
	}
	return i
}
