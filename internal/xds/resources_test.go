package xds

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
