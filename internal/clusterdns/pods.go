package clusterdns

import (
	"net/netip"
	"strings"
)

// podBackends answers <ip>.<ns>.pod.<zone> names by Config.Pods, as
// CoreDNS's findPods does. The namespace must exist in every mode;
// "<ns>.pod.<zone>" itself has no data. The first label is an address
// with '-' for '.' (exactly three dashes and no "--") or for ':'; a label
// that is not an address is NXDOMAIN, and so are longer names (CoreDNS
// ignores the extra labels). PodsVerified also needs a listed Pod with that
// address in the namespace.
func (s *Server) podBackends(r request) ([]backend, error) {
	if s.cfg.pods == PodsDisabled || !s.store.namespaceExists(r.namespace) {
		return nil, errNoName
	}
	switch {
	case r.service == "":
		return nil, nil
	case r.endpoint != "" || r.port != "" || r.protocol != "":
		return nil, errNoName
	}
	ip, ok := podLabelIP(r.service)
	if !ok {
		return nil, errNoName
	}
	if s.cfg.pods == PodsVerified && !s.store.podHasIP(r.namespace, ip) {
		return nil, errNoName
	}
	return []backend{{addr: ip, port: noPort, namespace: r.namespace}}, nil
}

// podLabelIP reads the address in a pod label such as 10-240-0-1 or
// fd00--1. An IPv4-mapped IPv6 address counts as IPv4, as net.ParseIP
// would have it.
func podLabelIP(label string) (netip.Addr, bool) {
	sep := ":"
	if strings.Count(label, "-") == 3 && !strings.Contains(label, "--") {
		sep = "."
	}
	ip, err := netip.ParseAddr(strings.ReplaceAll(label, "-", sep))
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}
