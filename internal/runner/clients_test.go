package runner

import (
	"slices"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/plan"
	"k8s.io/client-go/kubernetes/fake"
)

// TestPhases: each client starts within its first interval, at a phase the
// seed repeats, and clients are not in step.
func TestPhases(t *testing.T) {
	cs := []plan.Client{{Name: "a-0", Rate: 10}, {Name: "a-1", Rate: 10}, {Name: "b-0", Rate: 1000}}
	p1, p2, other := phases(42, cs), phases(42, cs), phases(43, cs)
	if !slices.Equal(p1, p2) {
		t.Errorf("seed 42 gave %v, then %v", p1, p2)
	}
	if slices.Equal(p1, other) {
		t.Errorf("seeds 42 and 43 gave the same phases %v", p1)
	}
	for i, p := range p1 {
		if limit := time.Duration(float64(time.Second) / cs[i].Rate); p < 0 || p >= limit {
			t.Errorf("client %s: phase %v, want within [0, %v)", cs[i].Name, p, limit)
		}
	}
	if p1[0] == p1[1] {
		t.Errorf("two clients at the same phase %v", p1[0])
	}
}

// TestKubernetesResolverConfig: a client on the "kubernetes" resolver
// dials the Service by its port's name through the lab's API, whether the
// file named the headless or the ClusterIP Service's port.
func TestKubernetesResolverConfig(t *testing.T) {
	api := fake.NewClientset()
	cl := &clients{dnsAddr: "127.96.0.10:53", api: api}
	for _, tt := range []struct {
		name   string
		target plan.Target
		want   string
	}{
		{name: "named port", target: plan.Target{Namespace: "shop", Service: "pricing", Host: "pricing.shop.svc.cluster.local", Port: 8471, PortName: "grpc"},
			want: "kubernetes://shop/pricing:grpc"},
		{name: "unnamed port", target: plan.Target{Namespace: "shop", Service: "db", Host: "db.shop.svc.cluster.local", Port: 5432},
			want: "kubernetes://shop/db"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := cl.loadConfig(plan.Client{Name: "order-0", Target: tt.target, Rate: 1, Settings: plan.Settings{Resolver: load.ResolverKubernetes}})
			if cfg.Target != tt.want || cfg.Kubernetes != api {
				t.Errorf("target %q (API set: %v), want %q on the lab's API", cfg.Target, cfg.Kubernetes == api, tt.want)
			}
		})
	}
	cfg := cl.loadConfig(plan.Client{Name: "order-0", Target: plan.Target{Host: "pricing.shop.svc.cluster.local", Port: 8471}, Rate: 1,
		Settings: plan.Settings{Resolver: load.ResolverGRPC}})
	if want := "dns://127.96.0.10:53/pricing.shop.svc.cluster.local:8471"; cfg.Target != want || cfg.Kubernetes != nil {
		t.Errorf("grpc resolver: target %q (API set: %v), want %q without the API", cfg.Target, cfg.Kubernetes != nil, want)
	}
}
