package runner

import (
	"testing"

	"github.com/pinlab/pinlab/internal/plan"
)

// TestFDNeed: the file descriptors a variant needs, by how its clients
// connect.
func TestFDNeed(t *testing.T) {
	headless := plan.Target{Headless: true, PeakPods: 50}
	vip := plan.Target{PeakPods: 50}
	grpc := plan.Settings{Protocol: plan.ProtocolGRPC}
	tests := []struct {
		name string
		g    plan.Group
		want int // beyond the lab and its pods
	}{
		{"headless round_robin: a connection per pod per client, both ends", plan.Group{Clients: 200, Target: headless, Policy: "round_robin", Settings: grpc}, 200 * 50 * 2},
		{"headless pick_first: one connection", plan.Group{Clients: 200, Target: headless, Policy: "pick_first", Settings: grpc}, 200 * 2},
		{"ClusterIP: one connection through kube-proxy's relay", plan.Group{Clients: 200, Target: vip, Policy: "round_robin", Settings: grpc}, 200 * 4},
		{"HTTP pool: up to its limit", plan.Group{Clients: 10, Target: vip, Settings: plan.Settings{Protocol: plan.ProtocolHTTP, MaxConnsPerHost: 8}}, 10 * 8 * 4},
		{"L7 sidecars: one connection each to the proxy, each proxy to every pod", plan.Group{Clients: 4, Target: vip,
			Settings: plan.Settings{Protocol: plan.ProtocolGRPC, L7Proxy: &plan.L7Proxy{Placement: "sidecar"}}}, 4*2 + 50*2*4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := plan.Variant{PeakPods: 50, Groups: []plan.Group{tt.g}}
			got, _ := fdNeed(v)
			if want := tt.want + plan.FDsPerLab + plan.FDsPerPod*50; got != want {
				t.Errorf("fdNeed = %d, want %d", got, want)
			}
		})
	}
}
