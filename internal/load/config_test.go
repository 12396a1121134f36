package load

import (
	"net/netip"
	"strings"
	"testing"
)

// TestTargetStaysInTheLab: a client target is refused before anything is
// sent when its resolution or its connections could leave the lab's
// addresses (a tester's `lab load dns://8.8.8.8/...` queried 8.8.8.8).
func TestTargetStaysInTheLab(t *testing.T) {
	tests := []struct {
		target, wantErr string
	}{
		{target: "dns://127.96.0.10:53/pricing.shop.svc.cluster.local:8471"},
		{target: "dns://127.96.0.10/pricing.shop.svc.cluster.local:8471"},
		{target: "passthrough:///127.244.0.5:8471"},
		{target: "kubernetes://shop/pricing:grpc", wantErr: `scheme "kubernetes"`}, // without the kubernetes resolver
		{target: "dns://8.8.8.8/example.com:443", wantErr: "refusing 8.8.8.8"},
		{target: "dns:///example.com:443", wantErr: "dns:/// resolves through the host's DNS"},
		{target: "example.com:443", wantErr: "no scheme"},
		{target: "passthrough:///192.0.2.1:443", wantErr: "refusing 192.0.2.1"},
		{target: "unix:///tmp/s.sock", wantErr: `scheme "unix"`},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			_, err := Config{Source: netip.MustParseAddr("127.203.1.1"), Rate: 1, Target: tt.target}.withDefaults()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("withDefaults: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestInCluster: a client in a cluster's pod takes any target with the
// grpc or kubernetes resolver, and no source address.
func TestInCluster(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "the pod's resolver", cfg: Config{Target: "dns:///pricing.shop.svc.cluster.local:8471"}},
		{name: "no scheme", cfg: Config{Target: "pricing.shop:8471"}},
		{name: "a pod IP", cfg: Config{Target: "passthrough:///10.8.3.4:8471"}},
		{name: "a source", cfg: Config{Target: "dns:///pricing:8471", Source: netip.MustParseAddr("127.203.1.1")}, wantErr: "dials from the pod's address"},
		{name: "cached resolver", cfg: Config{Target: "dns:///pricing:8471", Resolver: ResolverCached}, wantErr: `resolver "cached"`},
		{name: "once resolver", cfg: Config{Target: "dns:///pricing:8471", Resolver: ResolverOnce}, wantErr: `resolver "once"`},
		{name: "no target", cfg: Config{}, wantErr: "no target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.InCluster, cfg.Rate = true, 1
			_, err := cfg.withDefaults()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("withDefaults: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
