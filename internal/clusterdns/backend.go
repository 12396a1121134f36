package clusterdns

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// noPort marks a backend whose EndpointSlice declares no ports (as CoreDNS
// does with port -1): it answers A/AAAA and counts towards SRV weights, but
// yields no SRV record.
const noPort = -1

// backend is one thing a name resolves to (CoreDNS's msg.Service): an
// address with a port, or the alias of an ExternalName Service.
type backend struct {
	addr      netip.Addr // invalid for an alias
	alias     string     // ExternalName target, fully qualified; "" for an address
	port      int32      // port number, or noPort
	service   string
	namespace string

	// For an endpoint: its address as written in the EndpointSlice and its
	// hostname, from which its label is made when needed. rawAddr is ""
	// for a ClusterIP backend.
	rawAddr  string
	hostname *string
}

// target is the SRV target naming b: "<svc>.<ns>.svc.<zone>" for a
// ClusterIP, "<label>.<svc>.<ns>.svc.<zone>" for an endpoint.
func (b backend) target(zone string) string {
	if b.rawAddr == "" {
		return join(zone, b.service, b.namespace, svcLabel)
	}
	return join(zone, endpointLabel(b.hostname, b.rawAddr), b.service, b.namespace, svcLabel)
}

// backends resolves a parsed name to what it stands for, like CoreDNS's
// Records/findServices. A nil slice with a nil error is a name that exists
// without data (the apex, a subtree, a namespace).
func (s *Server) backends(r request) ([]backend, error) {
	switch {
	case r.subtree == "" || r.namespace == "":
		return nil, nil
	case r.subtree == podLabel:
		return s.podBackends(r)
	case !s.store.namespaceExists(r.namespace):
		return nil, errNoName
	case r.service == "":
		return nil, nil
	}
	svc := s.store.service(r.namespace, r.service)
	switch {
	case svc == nil:
		return nil, errNoName
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return externalBackends(svc, r)
	case isHeadless(svc) || r.endpoint != "":
		return s.endpointBackends(svc, r)
	default:
		return clusterIPBackends(svc, r)
	}
}

// externalBackends is the CNAME target of an ExternalName Service. Names
// below it do not exist, an endpoint label or a _<port>._<proto> pair alike
// (CoreDNS's findServices skips an ExternalName Service when the query has
// any of them); an IP or empty externalName is not an alias, so the Service
// has no records (as in CoreDNS).
func externalBackends(svc *corev1.Service, r request) ([]backend, error) {
	target := svc.Spec.ExternalName
	if r.endpoint != "" || r.port != "" || r.protocol != "" || target == "" {
		return nil, errNoName
	}
	if _, err := netip.ParseAddr(target); err == nil {
		return nil, errNoName
	}
	if _, ok := dns.IsDomainName(target); !ok {
		return nil, errNoName
	}
	b := backend{alias: dns.Fqdn(target), service: svc.Name, namespace: svc.Namespace}
	return []backend{b}, nil
}

// clusterIPBackends gives every ClusterIP for every matching Service port.
// Endpoints do not matter. No matching port is NXDOMAIN. A Service without
// ports (which the API allows only for headless ones) counts as one
// port-less backend per ClusterIP, as in CoreDNS.
func clusterIPBackends(svc *corev1.Service, r request) ([]backend, error) {
	var out []backend
	matched := false
	ips := clusterIPs(svc)
	ports := svc.Spec.Ports
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Port: noPort}}
	}
	for _, p := range ports {
		if !matches(r.port, p.Name) || !matches(r.protocol, string(p.Protocol)) {
			continue
		}
		matched = true
		for _, ip := range ips {
			out = append(out, backend{
				addr: ip, port: p.Port, service: svc.Name, namespace: svc.Namespace,
			})
		}
	}
	if !matched {
		return nil, errNoName
	}
	return out, nil
}

// endpointBackends gives one backend per ready address and matching port
// across all the Service's EndpointSlices, restricted to one endpoint label
// if the name has one. Nothing found is NXDOMAIN.
func (s *Server) endpointBackends(svc *corev1.Service, r request) ([]backend, error) {
	ess := s.store.endpointSlices(svc.Namespace, svc.Name)
	n := 0
	for _, es := range ess {
		n += len(es.Endpoints) * max(1, len(es.Ports))
	}
	out := make([]backend, 0, n)
	for _, es := range ess {
		if es.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		ports := slicePorts(es)
		for _, ep := range es.Endpoints {
			if !isReady(ep) {
				continue
			}
			out = appendEndpoint(out, svc, ep, ports, r)
		}
	}
	if len(out) == 0 {
		return nil, errNoName
	}
	return out, nil
}

func appendEndpoint(out []backend, svc *corev1.Service, ep discoveryv1.Endpoint, ports []discoveryv1.EndpointPort, r request) []backend {
	for _, a := range ep.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		if r.endpoint != "" && !strings.EqualFold(r.endpoint, endpointLabel(ep.Hostname, a)) {
			continue
		}
		for _, p := range ports {
			if !matches(r.port, deref(p.Name)) || !matches(r.protocol, protocol(p)) {
				continue
			}
			port := int32(noPort)
			if p.Port != nil {
				port = *p.Port
			}
			out = append(out, backend{
				addr: ip, port: port, service: svc.Name, namespace: svc.Namespace,
				rawAddr: a, hostname: ep.Hostname,
			})
		}
	}
	return out
}

// slicePorts returns es's ports, or one unnamed port-less entry if it
// declares none, so that its addresses still answer A/AAAA queries.
func slicePorts(es *discoveryv1.EndpointSlice) []discoveryv1.EndpointPort {
	if len(es.Ports) == 0 {
		return []discoveryv1.EndpointPort{{}}
	}
	return es.Ports
}

func protocol(p discoveryv1.EndpointPort) string {
	if p.Protocol == nil {
		return string(corev1.ProtocolTCP) // the API default
	}
	return string(*p.Protocol)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// isReady reports whether DNS serves the endpoint: conditions.ready true or
// unset. Serving and terminating are ignored (CoreDNS object/endpoint.go).
func isReady(ep discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

// endpointLabel names an endpoint inside its Service: its hostname, else
// its address with '.' or ':' turned into '-' and a trailing '-' completed
// with '0' (CoreDNS endpointHostname).
func endpointLabel(hostname *string, addr string) string {
	if hostname != nil && *hostname != "" {
		return *hostname
	}
	if strings.Contains(addr, ".") {
		return strings.ReplaceAll(addr, ".", "-")
	}
	label := strings.ReplaceAll(addr, ":", "-")
	if strings.HasSuffix(label, "-") {
		label += "0"
	}
	return label
}

func isHeadless(svc *corev1.Service) bool {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone
	}
	return svc.Spec.ClusterIP == corev1.ClusterIPNone
}

// clusterIPs returns the Service's ClusterIPs: spec.clusterIPs, or
// spec.clusterIP for objects written without the plural field.
func clusterIPs(svc *corev1.Service) []netip.Addr {
	raw := svc.Spec.ClusterIPs
	if len(raw) == 0 && svc.Spec.ClusterIP != "" {
		raw = []string{svc.Spec.ClusterIP}
	}
	out := make([]netip.Addr, 0, len(raw))
	for _, s := range raw {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip)
		}
	}
	return out
}
