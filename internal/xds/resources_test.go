package xds

import (
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAssignmentLocalities: endpoints by zone, each zone a locality
// weighted by its ready endpoints (at least 1), the health of each from
// its conditions, the port by the Service port's name.
func TestAssignmentLocalities(t *testing.T) {
	port, other := int32(8471), int32(9471)
	ep := func(addr, zone string, ready, serving, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Zone: ptr(zone),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(serving), Terminating: ptr(terminating)}}
	}
	slices := []*discoveryv1.EndpointSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Ports: []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: &port}, {Name: ptr("metrics"), Port: &other}},
			Endpoints: []discoveryv1.Endpoint{
				ep("10.0.0.1", "zone-a", true, true, false),
				ep("10.0.0.2", "zone-a", false, true, true),
				ep("10.0.0.3", "zone-b", false, false, false),
			}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Ports: []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: &port}},
			Endpoints: []discoveryv1.Endpoint{ep("10.0.0.4", "zone-b", true, true, false), ep("10.0.0.5", "zone-a", true, true, false)}},
	}
	cla := assignment("pricing.shop:8471", "grpc", slices)
	type lb struct {
		addr   string
		port   uint32
		health corev3.HealthStatus
	}
	want := map[string]struct {
		weight uint32
		eps    []lb
	}{
		"zone-a": {2, []lb{{"10.0.0.1", 8471, corev3.HealthStatus_HEALTHY}, {"10.0.0.2", 8471, corev3.HealthStatus_DRAINING}, {"10.0.0.5", 8471, corev3.HealthStatus_HEALTHY}}},
		"zone-b": {1, []lb{{"10.0.0.3", 8471, corev3.HealthStatus_UNHEALTHY}, {"10.0.0.4", 8471, corev3.HealthStatus_HEALTHY}}},
	}
	if len(cla.Endpoints) != len(want) {
		t.Fatalf("%d localities, want %d: %v", len(cla.Endpoints), len(want), cla.Endpoints)
	}
	for _, loc := range cla.Endpoints {
		w, ok := want[loc.GetLocality().GetZone()]
		if !ok {
			t.Errorf("locality %q not expected", loc.GetLocality().GetZone())
			continue
		}
		if loc.GetLoadBalancingWeight().GetValue() != w.weight {
			t.Errorf("zone %s: weight %d, want %d", loc.GetLocality().GetZone(), loc.GetLoadBalancingWeight().GetValue(), w.weight)
		}
		var got []lb
		for _, e := range loc.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			got = append(got, lb{sa.GetAddress(), sa.GetPortValue(), e.GetHealthStatus()})
		}
		if len(got) != len(w.eps) {
			t.Errorf("zone %s: %v, want %v", loc.GetLocality().GetZone(), got, w.eps)
			continue
		}
		for i := range got {
			if got[i] != w.eps[i] {
				t.Errorf("zone %s: endpoint %d is %v, want %v", loc.GetLocality().GetZone(), i, got[i], w.eps[i])
			}
		}
	}
}

// TestClusterAndRoute: a Service's annotations as the Cluster's
// load_balancing_policy (the picking policy under wrr_locality, ring_hash
// alone), its outlier_detection (an ejection kind off unless given), and
// ring_hash's header as the route's hash policy.
func TestClusterAndRoute(t *testing.T) {
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		policy      []string // the typed configs' names, outermost first
		hashHeader  string
		outlier     func(*clusterv3.OutlierDetection) string // "" when right
	}{
		{"default", nil, []string{"envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality", "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"}, "", nil},
		{"least_request", map[string]string{AnnotationPolicy: "least_request", AnnotationPolicyConfig: `{"choiceCount": 3}`},
			[]string{"envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality", "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest"}, "", nil},
		{"weighted_round_robin", map[string]string{AnnotationPolicy: "weighted_round_robin"},
			[]string{"envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality", "envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin"}, "", nil},
		{"ring_hash on a header", map[string]string{AnnotationPolicy: "ring_hash", AnnotationPolicyConfig: `{"requestHashHeader": "pinlab-client"}`},
			[]string{"envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash"}, "pinlab-client", nil},
		{"failure percentage only", map[string]string{AnnotationOutlierDetection: `{"interval": "1s", "failurePercentageEjection": {"threshold": 30}}`},
			[]string{"envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality", "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"}, "",
			func(o *clusterv3.OutlierDetection) string {
				switch {
				case o.GetInterval().AsDuration() != time.Second:
					return "interval"
				case o.GetEnforcingSuccessRate() == nil || o.GetEnforcingSuccessRate().GetValue() != 0:
					return "success rate ejection not turned off"
				case o.GetEnforcingFailurePercentage().GetValue() != 100 || o.GetFailurePercentageThreshold().GetValue() != 30:
					return "failure percentage ejection not on at threshold 30"
				}
				return ""
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop", Annotations: tt.annotations}}
			set, err := settingsOf(svc)
			if err != nil {
				t.Fatal(err)
			}
			c := cluster("pricing.shop:8471", set)
			var names []string
			for p := c.GetLoadBalancingPolicy(); p != nil; {
				tc := p.GetPolicies()[0].GetTypedExtensionConfig()
				names = append(names, tc.GetName())
				m, err := tc.GetTypedConfig().UnmarshalNew()
				if err != nil {
					t.Fatal(err)
				}
				w, ok := m.(*wrrlocalityv3.WrrLocality)
				if !ok {
					break
				}
				p = w.GetEndpointPickingPolicy()
			}
			if !slices.Equal(names, tt.policy) {
				t.Errorf("policies %q, want %q", names, tt.policy)
			}
			if (c.GetOutlierDetection() != nil) != (tt.outlier != nil) {
				t.Fatalf("outlier detection %v, want it %v", c.GetOutlierDetection(), tt.outlier != nil)
			}
			if tt.outlier != nil {
				if what := tt.outlier(c.GetOutlierDetection()); what != "" {
					t.Errorf("outlier detection %v: %s", c.GetOutlierDetection(), what)
				}
			}
			hp := route("pricing.shop:8471", set.policy).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy()
			if got := ""; len(hp) > 0 {
				got = hp[0].GetHeader().GetHeaderName()
				if got != tt.hashHeader {
					t.Errorf("hash policy header %q, want %q", got, tt.hashHeader)
				}
			} else if tt.hashHeader != "" {
				t.Errorf("no hash policy, want header %q", tt.hashHeader)
			}
		})
	}
}
