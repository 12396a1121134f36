package proxy

import (
	"net/netip"

	"github.com/pinlab/pinlab/internal/endpoints"
	v1 "k8s.io/api/core/v1"
)

// labelServiceProxyName marks a Service another proxy claims; kube-proxy
// does not watch such Services (pkg/proxy/apis, cmd/kube-proxy server
// setup).
const labelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// Endpoint is one backend of a Service port: the address a KUBE-SEP chain
// would DNAT to, and the pod named by the EndpointSlice targetRef ("" when the
// endpoint has no Pod reference).
type Endpoint struct {
	Addr netip.AddrPort
	Pod  string
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

// backends converts the endpoints a new connection may use (sorted by
// address) into the table's form.
func backends(eps []endpoints.Endpoint) []Endpoint {
	var out []Endpoint
	for _, e := range eps {
		out = append(out, Endpoint{Addr: e.Addr, Pod: e.Pod})
	}
	return out
}
