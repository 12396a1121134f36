package endpoints

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	readyCond       = discovery.EndpointConditions{Ready: new(true), Serving: new(true), Terminating: new(false)}
	notReadyCond    = discovery.EndpointConditions{Ready: new(false), Serving: new(false), Terminating: new(false)}
	drainingCond    = discovery.EndpointConditions{Ready: new(false), Serving: new(true), Terminating: new(true)}
	terminatingCond = discovery.EndpointConditions{Ready: new(false), Serving: new(false), Terminating: new(true)}
)

var addrPortEqual = cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })

func sliceEP(ip, pod string, c discovery.EndpointConditions) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{ip}, Conditions: c, TargetRef: &v1.ObjectReference{Kind: "Pod", Name: pod}}
}

func mkSlice(name string, typ discovery.AddressType, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: typ, Ports: ports, Endpoints: eps}
}

func headless(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	s.Labels = map[string]string{LabelHeadless: ""}
	return s
}

func namedPort(name string, n int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: new(name), Port: new(n), Protocol: new(v1.ProtocolTCP)}
}

// ready is the Endpoint a readyCond endpoint resolves to.
func ready(addr, pod string) Endpoint {
	return Endpoint{Addr: netip.MustParseAddrPort(addr), Pod: pod, Ready: true, Serving: true}
}

func TestFilterEndpoints(t *testing.T) {
	grpc := []discovery.EndpointPort{namedPort("grpc", 9000), namedPort("metrics", 9100)}
	v4, v6 := discovery.AddressTypeIPv4, discovery.AddressTypeIPv6
	tests := []struct {
		name        string
		filter      Filter
		slices      []*discovery.EndpointSlice
		want        []Endpoint
		wantOutside []netip.AddrPort
	}{{
		name:   "named port resolves to the slice port number with that name",
		filter: Filter{Port: "metrics"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, grpc, sliceEP("127.244.0.1", "p1", readyCond))},
		want:   []Endpoint{ready("127.244.0.1:9100", "p1")},
	}, {
		name:   "no port with the name",
		filter: Filter{Port: "http"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, grpc, sliceEP("127.244.0.1", "p1", readyCond))},
	}, {
		name:   "unnamed Service port matches the empty name",
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, []discovery.EndpointPort{namedPort("", 8080)}, sliceEP("127.244.0.1", "p1", readyCond))},
		want:   []Endpoint{ready("127.244.0.1:8080", "p1")},
	}, {
		// Drift case: internal/proxy used to skip a nil name, as kube-proxy
		// does with what the API server never hands it.
		name:   "slice port with nil name matches the empty name, as API defaulting makes it",
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, []discovery.EndpointPort{{Port: new(int32(8080))}}, sliceEP("127.244.0.1", "p1", readyCond))},
		want:   []Endpoint{ready("127.244.0.1:8080", "p1")},
	}, {
		name:   "slice port with nil name does not match a named port",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, []discovery.EndpointPort{{Port: new(int32(8080))}}, sliceEP("127.244.0.1", "p1", readyCond))},
	}, {
		name:   "UDP slice port ignored",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, []discovery.EndpointPort{{Name: new("grpc"), Port: new(int32(9000)), Protocol: new(v1.ProtocolUDP)}},
			sliceEP("127.244.0.1", "p1", readyCond))},
	}, {
		name:   "nil and empty protocols are TCP",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{
			mkSlice("a", v4, []discovery.EndpointPort{{Name: new("grpc"), Port: new(int32(9000))}}, sliceEP("127.244.0.1", "p1", readyCond)),
			mkSlice("b", v4, []discovery.EndpointPort{{Name: new("grpc"), Port: new(int32(9000)), Protocol: new(v1.Protocol(""))}}, sliceEP("127.244.0.2", "p2", readyCond)),
		},
		want: []Endpoint{ready("127.244.0.1:9000", "p1"), ready("127.244.0.2:9000", "p2")},
	}, {
		name:   "port without a valid number ignored",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{
			mkSlice("nil", v4, []discovery.EndpointPort{{Name: new("grpc")}}, sliceEP("127.244.0.1", "p1", readyCond)),
			mkSlice("zero", v4, []discovery.EndpointPort{namedPort("grpc", 0)}, sliceEP("127.244.0.2", "p2", readyCond)),
			mkSlice("big", v4, []discovery.EndpointPort{namedPort("grpc", 65536)}, sliceEP("127.244.0.3", "p3", readyCond)),
		},
	}, {
		name:   "all slices are merged in name order, an address in two counts once, first slice by name",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{
			mkSlice("b", v4, grpc, sliceEP("127.244.0.2", "p2", readyCond), sliceEP("127.244.0.1", "from-b", readyCond)),
			mkSlice("a", v4, grpc, sliceEP("127.244.0.1", "from-a", readyCond)),
		},
		want: []Endpoint{ready("127.244.0.1:9000", "from-a"), ready("127.244.0.2:9000", "p2")},
	}, {
		name:   "IPv6 slice ignored by default",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v6, grpc, sliceEP("fd00::1", "p1", readyCond))},
	}, {
		name:   "IPv6 family takes IPv6 slices only",
		filter: Filter{Port: "grpc", Family: v6, InLab: func(netip.Addr) bool { return true }},
		slices: []*discovery.EndpointSlice{
			mkSlice("a", v6, grpc, sliceEP("fd00::1", "p6", readyCond), sliceEP("::ffff:127.244.0.9", "mapped", readyCond)),
			mkSlice("b", v4, grpc, sliceEP("127.244.0.1", "p4", readyCond)),
		},
		want: []Endpoint{ready("[fd00::1]:9000", "p6")},
	}, {
		name:   "an IPv4-mapped address in an IPv4 slice counts as IPv4",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, grpc, sliceEP("::ffff:127.244.0.1", "p1", readyCond))},
		want:   []Endpoint{ready("127.244.0.1:9000", "p1")},
	}, {
		name:   "unparsable address and endpoint without an address skipped",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, grpc, sliceEP("garbage", "bad", readyCond), discovery.Endpoint{}, sliceEP("127.244.0.1", "p1", readyCond))},
		want:   []Endpoint{ready("127.244.0.1:9000", "p1")},
	}, {
		name:   "first address only",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, grpc, discovery.Endpoint{Addresses: []string{"127.244.0.1", "127.244.0.2"}})},
		want:   []Endpoint{ready("127.244.0.1:9000", "")},
	}, {
		name:   "pod name only from a Pod targetRef",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, grpc,
			discovery.Endpoint{Addresses: []string{"127.244.0.1"}, TargetRef: &v1.ObjectReference{Name: "no-kind"}},
			discovery.Endpoint{Addresses: []string{"127.244.0.2"}, TargetRef: &v1.ObjectReference{Kind: "Node", Name: "node-1"}},
		)},
		want: []Endpoint{ready("127.244.0.1:9000", "no-kind"), ready("127.244.0.2:9000", "")},
	}, {
		name:   "headless-labelled slice ignored by default, as kube-proxy",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{headless(mkSlice("h", v4, grpc, sliceEP("127.244.0.9", "h", readyCond)))},
	}, {
		// Drift case: the L7 proxy keeps them.
		name:   "headless-labelled slice used with Headless",
		filter: Filter{Port: "grpc", Headless: true},
		slices: []*discovery.EndpointSlice{headless(mkSlice("h", v4, grpc, sliceEP("127.244.0.9", "h", readyCond)))},
		want:   []Endpoint{ready("127.244.0.9:9000", "h")},
	}, {
		name:        "endpoint outside loopback reported, not used (nil InLab)",
		filter:      Filter{Port: "grpc"},
		slices:      []*discovery.EndpointSlice{mkSlice("a", v4, grpc, sliceEP("10.244.0.1", "p1", readyCond), sliceEP("127.244.0.2", "p2", readyCond))},
		want:        []Endpoint{ready("127.244.0.2:9000", "p2")},
		wantOutside: []netip.AddrPort{netip.MustParseAddrPort("10.244.0.1:9000")},
	}, {
		name:   "the caller's InLab decides, and an outside address counts once",
		filter: Filter{Port: "grpc", InLab: netip.MustParsePrefix("127.244.0.0/16").Contains},
		slices: []*discovery.EndpointSlice{
			mkSlice("a", v4, grpc, sliceEP("127.1.0.1", "p1", readyCond), sliceEP("127.244.0.2", "p2", readyCond)),
			mkSlice("b", v4, grpc, sliceEP("127.1.0.1", "again", readyCond)),
		},
		want:        []Endpoint{ready("127.244.0.2:9000", "p2")},
		wantOutside: []netip.AddrPort{netip.MustParseAddrPort("127.1.0.1:9000")},
	}, {
		name:   "conditions resolved",
		filter: Filter{Port: "grpc"},
		slices: []*discovery.EndpointSlice{mkSlice("a", v4, grpc,
			sliceEP("127.244.0.1", "nil", discovery.EndpointConditions{}),
			sliceEP("127.244.0.2", "ready-nil-serving", discovery.EndpointConditions{Ready: new(true), Terminating: new(true)}),
			sliceEP("127.244.0.3", "unready-nil-serving", discovery.EndpointConditions{Ready: new(false), Terminating: new(true)}),
			sliceEP("127.244.0.4", "draining", drainingCond),
			sliceEP("127.244.0.5", "not-ready", notReadyCond),
		)},
		want: []Endpoint{
			{Addr: netip.MustParseAddrPort("127.244.0.1:9000"), Pod: "nil", Ready: true, Serving: true},
			{Addr: netip.MustParseAddrPort("127.244.0.2:9000"), Pod: "ready-nil-serving", Ready: true, Serving: true, Terminating: true},
			{Addr: netip.MustParseAddrPort("127.244.0.3:9000"), Pod: "unready-nil-serving", Terminating: true},
			{Addr: netip.MustParseAddrPort("127.244.0.4:9000"), Pod: "draining", Serving: true, Terminating: true},
			{Addr: netip.MustParseAddrPort("127.244.0.5:9000"), Pod: "not-ready"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, outside := tt.filter.Endpoints(tt.slices)
			if diff := cmp.Diff(tt.want, got, addrPortEqual); diff != "" {
				t.Errorf("Endpoints() eps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantOutside, outside, addrPortEqual); diff != "" {
				t.Errorf("Endpoints() outside (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEligible(t *testing.T) {
	nilServing := discovery.EndpointConditions{Ready: new(false), Terminating: new(true)}
	tests := []struct {
		name string
		eps  []discovery.Endpoint
		want []string // pod names
	}{
		{"ready ones only, sorted by address", []discovery.Endpoint{sliceEP("127.244.0.2", "b", readyCond), sliceEP("127.244.0.1", "a", readyCond), sliceEP("127.244.0.3", "c", notReadyCond)}, []string{"a", "b"}},
		{"nil conditions count as ready", []discovery.Endpoint{sliceEP("127.244.0.1", "a", discovery.EndpointConditions{})}, []string{"a"}},
		{"ready wins over serving terminating", []discovery.Endpoint{sliceEP("127.244.0.1", "a", drainingCond), sliceEP("127.244.0.2", "b", readyCond)}, []string{"b"}},
		{"fallback to serving terminating, sorted", []discovery.Endpoint{sliceEP("127.244.0.4", "d", drainingCond), sliceEP("127.244.0.1", "a", drainingCond), sliceEP("127.244.0.2", "b", terminatingCond), sliceEP("127.244.0.3", "c", notReadyCond)}, []string{"a", "d"}},
		{"not serving terminating never", []discovery.Endpoint{sliceEP("127.244.0.2", "b", terminatingCond)}, nil},
		{"serving but not terminating is no fallback", []discovery.Endpoint{sliceEP("127.244.0.1", "a", discovery.EndpointConditions{Ready: new(false), Serving: new(true)})}, nil},
		{"nil serving defers to ready", []discovery.Endpoint{sliceEP("127.244.0.1", "a", nilServing)}, nil},
		{"ready with nil terminating", []discovery.Endpoint{sliceEP("127.244.0.1", "a", discovery.EndpointConditions{Ready: new(true)})}, []string{"a"}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mkSlice("a", discovery.AddressTypeIPv4, []discovery.EndpointPort{namedPort("grpc", 9000)}, tt.eps...)
			eps, _ := Filter{Port: "grpc"}.Endpoints([]*discovery.EndpointSlice{s})
			var got []string
			for _, e := range Eligible(eps) {
				got = append(got, e.Pod)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Eligible() pods (-want +got):\n%s", diff)
			}
		})
	}
}
