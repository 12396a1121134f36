package proxy

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClusterIPv4(t *testing.T) {
	tests := []struct {
		name   string
		svc    v1.Service
		want   string
		wantOK bool
	}{
		{"clusterIP", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "127.96.0.1", ClusterIPs: []string{"127.96.0.1"}}}, "127.96.0.1", true},
		{"only legacy clusterIP field", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "127.96.0.2"}}, "127.96.0.2", true},
		{"dual stack, IPv6 primary", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "fd00::1", ClusterIPs: []string{"fd00::1", "127.96.0.3"}}}, "127.96.0.3", true},
		{"IPv6 only", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "fd00::1", ClusterIPs: []string{"fd00::1"}}}, "", false},
		{"headless", v1.Service{Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone, ClusterIPs: []string{v1.ClusterIPNone}}}, "", false},
		{"ExternalName", v1.Service{Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "db.example.com"}}, "", false},
		{"no ClusterIP", v1.Service{}, "", false},
		{"claimed by another proxy", v1.Service{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labelServiceProxyName: "other"}},
			Spec:       v1.ServiceSpec{ClusterIP: "127.96.0.4"},
		}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ip, ok := clusterIPv4(&tt.svc)
			got := ""
			if ok {
				got = ip.String()
			}
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("clusterIPv4() = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func ep(ip, pod string, c discovery.EndpointConditions) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{ip}, Conditions: c, TargetRef: &v1.ObjectReference{Kind: "Pod", Name: pod}}
}

func mkSlice(name string, typ discovery.AddressType, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: typ, Ports: ports, Endpoints: eps}
}

func inLab(a netip.Addr) bool { return netip.MustParsePrefix("127.0.0.0/8").Contains(a) }

func TestCandidates(t *testing.T) {
	grpc := []discovery.EndpointPort{slicePort("grpc", 9000), slicePort("metrics", 9100)}
	udp := []discovery.EndpointPort{{Name: new("grpc"), Port: new(int32(9000)), Protocol: new(v1.ProtocolUDP)}}
	unnamed := []discovery.EndpointPort{slicePort("", 8080)}
	noName := []discovery.EndpointPort{{Port: new(int32(8080))}}
	headless := mkSlice("h", discovery.AddressTypeIPv4, grpc, ep("127.244.0.9", "h", readyCond))
	headless.Labels = map[string]string{labelHeadless: ""}

	tests := []struct {
		name        string
		slices      []*discovery.EndpointSlice
		port        string
		want        []Endpoint
		wantOutside []netip.AddrPort
	}{{
		name:   "named port resolves to the slice port number with that name",
		slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, grpc, ep("127.244.0.1", "p1", readyCond))},
		port:   "metrics",
		want:   []Endpoint{{netip.MustParseAddrPort("127.244.0.1:9100"), "p1"}},
	}, {
		name: "all slices of the Service are merged, duplicates once",
		slices: []*discovery.EndpointSlice{
			mkSlice("b", discovery.AddressTypeIPv4, grpc, ep("127.244.0.2", "p2", readyCond), ep("127.244.0.1", "dup", readyCond)),
			mkSlice("a", discovery.AddressTypeIPv4, grpc, ep("127.244.0.1", "p1", readyCond)),
		},
		port: "grpc",
		want: []Endpoint{{netip.MustParseAddrPort("127.244.0.1:9000"), "p1"}, {netip.MustParseAddrPort("127.244.0.2:9000"), "p2"}},
	}, {
		name:   "no port with the name",
		slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, grpc, ep("127.244.0.1", "p1", readyCond))},
		port:   "http",
	}, {
		name:   "UDP slice port ignored",
		slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, udp, ep("127.244.0.1", "p1", readyCond))},
		port:   "grpc",
	}, {
		name:   "unnamed Service port matches the empty name",
		slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, unnamed, ep("127.244.0.1", "p1", readyCond))},
		port:   "",
		want:   []Endpoint{{netip.MustParseAddrPort("127.244.0.1:8080"), "p1"}},
	}, {
		name:   "slice port with nil name ignored",
		slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, noName, ep("127.244.0.1", "p1", readyCond))},
		port:   "",
	}, {
		name:   "IPv6 slice ignored",
		slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv6, grpc, ep("fd00::1", "p1", readyCond))},
		port:   "grpc",
	}, {
		name:   "headless-labelled slice ignored",
		slices: []*discovery.EndpointSlice{headless},
		port:   "grpc",
	}, {
		name:        "endpoint outside loopback reported, not used",
		slices:      []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, grpc, ep("10.244.0.1", "p1", readyCond), ep("127.244.0.2", "p2", readyCond))},
		port:        "grpc",
		want:        []Endpoint{{netip.MustParseAddrPort("127.244.0.2:9000"), "p2"}},
		wantOutside: []netip.AddrPort{netip.MustParseAddrPort("10.244.0.1:9000")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands, outside := candidates(tt.slices, tt.port, inLab)
			var got []Endpoint
			for _, c := range cands {
				got = append(got, c.Endpoint)
			}
			if diff := cmp.Diff(tt.want, got, netipEqual); diff != "" {
				t.Errorf("candidates() endpoints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantOutside, outside, netipEqual); diff != "" {
				t.Errorf("candidates() outside (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEligible(t *testing.T) {
	tests := []struct {
		name string
		eps  []discovery.Endpoint
		want []string // pod names
	}{
		{"ready ones only", []discovery.Endpoint{ep("127.244.0.2", "b", readyCond), ep("127.244.0.1", "a", readyCond), ep("127.244.0.3", "c", notReadyCond)}, []string{"a", "b"}},
		{"nil conditions count as ready", []discovery.Endpoint{ep("127.244.0.1", "a", discovery.EndpointConditions{})}, []string{"a"}},
		{"ready wins over serving terminating", []discovery.Endpoint{ep("127.244.0.1", "a", drainingCond), ep("127.244.0.2", "b", readyCond)}, []string{"b"}},
		{"fallback to serving terminating", []discovery.Endpoint{ep("127.244.0.1", "a", drainingCond), ep("127.244.0.2", "b", terminatingCond), ep("127.244.0.3", "c", notReadyCond)}, []string{"a"}},
		{"not serving terminating never", []discovery.Endpoint{ep("127.244.0.2", "b", terminatingCond)}, nil},
		{"serving but not terminating is no fallback", []discovery.Endpoint{ep("127.244.0.1", "a", discovery.EndpointConditions{Ready: new(false), Serving: new(true)})}, nil},
		{"nil serving defers to ready", []discovery.Endpoint{ep("127.244.0.1", "a", discovery.EndpointConditions{Ready: new(false), Terminating: new(true)})}, nil},
		{"ready with nil terminating", []discovery.Endpoint{ep("127.244.0.1", "a", discovery.EndpointConditions{Ready: new(true)})}, []string{"a"}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mkSlice("a", discovery.AddressTypeIPv4, []discovery.EndpointPort{slicePort("grpc", 9000)}, tt.eps...)
			cands, _ := candidates([]*discovery.EndpointSlice{s}, "grpc", inLab)
			var got []string
			for _, e := range eligible(cands) {
				got = append(got, e.Pod)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("eligible() pods (-want +got):\n%s", diff)
			}
		})
	}
}
