package kubetier

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The DNS conformance fixture (/work/shared/k8s-dns.md section 5), moved
// into the tier's ranges: ClusterIPs in 10.96.200.0/24, endpoint
// addresses in 10.244.200.0/24 and fd00:abcd::/64. Nothing listens on
// them; only the names are asked. The API server is IPv4 single-stack, so
// the IPv6 and dual-stack Services (cases 4-6) are left out; IPv6
// endpoints of a headless Service are in.
const (
	dnsNS   = "dnsconf"
	hdlsV6  = "fd00:abcd::1"
	svc1IP  = "10.96.200.1"
	svc2IP  = "10.96.200.2"
	unnamed = "10.96.200.5"
)

// dnsService returns a selector-less Service (its EndpointSlices are
// written by the test, as the EndpointSlice controller would for pods).
func dnsService(name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: dnsNS},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports}}
}

func port(name string, proto corev1.Protocol, p int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: p, TargetPort: intstr.FromInt32(p)}
}

// endpoint is one EndpointSlice endpoint: its conditions as the
// EndpointSlice controller sets them.
type endpoint struct {
	ip, hostname                string
	ready, serving, terminating bool
}

func ready(ip, hostname string) endpoint {
	return endpoint{ip: ip, hostname: hostname, ready: true, serving: true}
}

// slice returns an EndpointSlice of service with eps and one http/TCP/80
// port.
func slice(service, name string, family discoveryv1.AddressType, eps ...endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: dnsNS, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(80))}},
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating)}}
		if e.hostname != "" {
			ep.Hostname = ptr.To(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// createDNSFixture creates the fixture's namespace, Services and
// EndpointSlices through the API server; the namespace is deleted when
// the test ends.
func createDNSFixture(t *testing.T, ctx context.Context) {
	t.Helper()
	c := theLab.Cluster.Client()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dnsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.CoreV1().Namespaces().Delete(ctx, dnsNS, metav1.DeleteOptions{})
	})
	http := port("http", corev1.ProtocolTCP, 80)
	pnr := dnsService("hdlspnr", corev1.ClusterIPNone, http)
	pnr.Spec.PublishNotReadyAddresses = true
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: dnsNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "ext.example.com"}}
	ext2 := ext.DeepCopy()
	ext2.Name, ext2.Spec.ExternalName = "ext2svc", "svc1."+dnsNS+".svc.cluster.local"
	for _, s := range []*corev1.Service{
		dnsService("svc1", svc1IP, http),
		dnsService("svc2", svc2IP, http, port("dns", corev1.ProtocolUDP, 53)),
		dnsService("unnamed", unnamed, port("", corev1.ProtocolTCP, 8080)),
		dnsService("hdls", corev1.ClusterIPNone, http),
		dnsService("hdlsempty", corev1.ClusterIPNone, http),
		pnr, ext, ext2,
	} {
		if _, err := c.CoreV1().Services(dnsNS).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("service %s: %v", s.Name, err)
		}
	}
	for _, s := range []*discoveryv1.EndpointSlice{
		slice("svc1", "svc1-a", discoveryv1.AddressTypeIPv4, ready("10.244.200.1", "ep1a")),
		slice("hdls", "hdls-v4", discoveryv1.AddressTypeIPv4,
			ready("10.244.200.2", ""), ready("10.244.200.3", ""), ready("10.244.200.4", "web-0"),
			endpoint{ip: "10.244.200.9", hostname: "web-9"},                 // not ready
			endpoint{ip: "10.244.200.8", serving: true, terminating: true}), // terminating
		slice("hdls", "hdls-v6", discoveryv1.AddressTypeIPv6, ready(hdlsV6, "")),
		slice("hdlsempty", "hdlsempty-a", discoveryv1.AddressTypeIPv4, endpoint{ip: "10.244.200.10"}),
		// The EndpointSlice controller marks a not-ready pod's endpoint
		// ready (serving false) when the Service publishes not-ready
		// addresses.
		slice("hdlspnr", "hdlspnr-a", discoveryv1.AddressTypeIPv4, endpoint{ip: "10.244.200.11", hostname: "db-0", ready: true}),
	} {
		if _, err := c.DiscoveryV1().EndpointSlices(dnsNS).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("endpointslice %s: %v", s.Name, err)
		}
	}
}
