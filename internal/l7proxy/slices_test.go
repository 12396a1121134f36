package l7proxy

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func sliceEP(ip, pod string, c discovery.EndpointConditions) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{ip}, Conditions: c, TargetRef: &v1.ObjectReference{Kind: "Pod", Name: pod}}
}

func mkSlice(name string, typ discovery.AddressType, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: typ, Ports: ports, Endpoints: eps}
}

func namedPort(name string, n int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: new(name), Port: new(n), Protocol: new(v1.ProtocolTCP)}
}

func inLab(a netip.Addr) bool { return netip.MustParsePrefix("127.0.0.0/8").Contains(a) }

// TestEligibleTargets: which endpoints of a Service port's slices the proxy
// routes to, with kube-proxy's conventions.
func TestEligibleTargets(t *testing.T) {
	grpcPorts := []discovery.EndpointPort{namedPort("grpc", 9000), namedPort("metrics", 9100)}
	nilConds := discovery.EndpointConditions{}
	tests := []struct {
		name        string
		port        string
		slices      []*discovery.EndpointSlice
		want        []string // addr/pod
		wantOutside []string
	}{
		{
			name: "ready endpoints across slices, sorted, port by name",
			port: "grpc",
			slices: []*discovery.EndpointSlice{
				mkSlice("b", discovery.AddressTypeIPv4, grpcPorts, sliceEP("127.244.0.2", "p2", readyCond)),
				mkSlice("a", discovery.AddressTypeIPv4, grpcPorts, sliceEP("127.244.0.1", "p1", readyCond), sliceEP("127.244.0.3", "p3", notReadyCond)),
			},
			want: []string{"127.244.0.1:9000/p1", "127.244.0.2:9000/p2"},
		},
		{
			name:   "nil conditions count as ready",
			port:   "grpc",
			slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, grpcPorts, sliceEP("127.244.0.1", "p1", nilConds))},
			want:   []string{"127.244.0.1:9000/p1"},
		},
		{
			name: "terminating endpoints only when nothing is ready",
			port: "metrics",
			slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, grpcPorts,
				sliceEP("127.244.0.1", "p1", terminatingCond),
				sliceEP("127.244.0.2", "p2", discovery.EndpointConditions{Ready: new(false), Serving: new(false), Terminating: new(true)}),
			)},
			want: []string{"127.244.0.1:9100/p1"},
		},
		{
			name: "ready wins over serving terminating",
			port: "grpc",
			slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, grpcPorts,
				sliceEP("127.244.0.1", "p1", terminatingCond), sliceEP("127.244.0.2", "p2", readyCond))},
			want: []string{"127.244.0.2:9000/p2"},
		},
		{
			name: "IPv6 slices, other port names, UDP ports are skipped",
			port: "grpc",
			slices: []*discovery.EndpointSlice{
				mkSlice("v6", discovery.AddressTypeIPv6, grpcPorts, sliceEP("::1", "p6", readyCond)),
				mkSlice("other", discovery.AddressTypeIPv4, []discovery.EndpointPort{namedPort("http", 80)}, sliceEP("127.244.0.5", "p5", readyCond)),
				mkSlice("udp", discovery.AddressTypeIPv4, []discovery.EndpointPort{{Name: new("grpc"), Port: new(int32(9000)), Protocol: new(v1.ProtocolUDP)}},
					sliceEP("127.244.0.7", "p7", readyCond)),
			},
		},
		{
			name:   "unnamed port of a single-port Service",
			port:   "",
			slices: []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, []discovery.EndpointPort{{Port: new(int32(8080))}}, sliceEP("127.244.0.1", "p1", readyCond))},
			want:   []string{"127.244.0.1:8080/p1"},
		},
		{
			name: "an address in two slices counts once, first slice by name",
			port: "grpc",
			slices: []*discovery.EndpointSlice{
				mkSlice("b", discovery.AddressTypeIPv4, grpcPorts, sliceEP("127.244.0.1", "from-b", readyCond)),
				mkSlice("a", discovery.AddressTypeIPv4, grpcPorts, sliceEP("127.244.0.1", "from-a", readyCond)),
			},
			want: []string{"127.244.0.1:9000/from-a"},
		},
		{
			name:        "addresses outside the lab are reported, not used",
			port:        "grpc",
			slices:      []*discovery.EndpointSlice{mkSlice("a", discovery.AddressTypeIPv4, grpcPorts, sliceEP("10.0.0.1", "far", readyCond), sliceEP("garbage", "bad", readyCond))},
			wantOutside: []string{"10.0.0.1:9000"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, outside := targets(tt.slices, tt.port, inLab)
			var got, gotOutside []string
			for _, t := range eligible(ts) {
				got = append(got, t.addr.String()+"/"+t.pod)
			}
			for _, a := range outside {
				gotOutside = append(gotOutside, a.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("eligible targets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantOutside, gotOutside); diff != "" {
				t.Errorf("outside (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServicePortName(t *testing.T) {
	svc := &v1.Service{Spec: v1.ServiceSpec{Ports: []v1.ServicePort{
		{Name: "grpc", Port: 8471, Protocol: v1.ProtocolTCP},
		{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
		{Name: "metrics", Port: 9100},
	}}}
	tests := []struct {
		name   string
		number int32
		want   string
		wantOK bool
	}{
		{"TCP port", 8471, "grpc", true},
		{"empty protocol is TCP", 9100, "metrics", true},
		{"UDP port", 53, "", false},
		{"no such port", 1, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := servicePortName(svc, tt.number)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("servicePortName(%d) = %q, %v; want %q, %v", tt.number, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
