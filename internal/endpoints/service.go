package endpoints

import v1 "k8s.io/api/core/v1"

// IsTCP reports whether p is TCP; the empty protocol is TCP, as API
// defaulting makes it (fake clientsets do not default).
func IsTCP(p v1.Protocol) bool { return p == "" || p == v1.ProtocolTCP }

// ServicePortName maps a Service port number to the port's name, the key
// EndpointSlice ports carry, as kube-proxy matches a ServicePort to slice
// ports; false if svc has no TCP port with that number. For callers
// configured with a port number (the L7 proxy's Port).
func ServicePortName(svc *v1.Service, number int32) (string, bool) {
	for _, p := range svc.Spec.Ports {
		if p.Port == number && IsTCP(p.Protocol) {
			return p.Name, true
		}
	}
	return "", false
}
