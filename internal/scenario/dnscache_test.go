package scenario_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/scenario"
)

// TestDNSCache: spec.dns.cache becomes the plan's cache plugin, as the
// Corefile lines would; mistakes are errors at the field.
func TestDNSCache(t *testing.T) {
	cl := func(capacity int, maxTTL, minTTL time.Duration) plan.DNSCacheClass {
		return plan.DNSCacheClass{Capacity: capacity, MaxTTL: maxTTL, MinTTL: minTTL}
	}
	tests := []struct {
		name     string
		cache    string // spec.dns's cache field, YAML flow; "" for none
		want     *plan.DNSCache
		corefile string
		wantErr  []string
	}{
		{name: "none"},
		{name: "kubeadm: cluster.local not kept", cache: "{preset: kubeadm}",
			want: &plan.DNSCache{Success: plan.DNSCacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}},
				Denial: plan.DNSCacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}}},
			corefile: "cache 30 { disable success cluster.local; disable denial cluster.local }"},
		{name: "kubeadm-1.31: bare cache 30", cache: "{preset: kubeadm-1.31}",
			want: &plan.DNSCache{Success: cl(0, 30*time.Second, 0), Denial: cl(0, 30*time.Second, 0)}, corefile: "cache 30"},
		{name: "kubeadm with lines", cache: "{preset: kubeadm, success: {capacity: 2048}}",
			want: &plan.DNSCache{Success: plan.DNSCacheClass{Capacity: 2048, MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}},
				Denial: plan.DNSCacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}}},
			corefile: "cache { success 2048 30 5; disable success cluster.local; denial 10000 30 5; disable denial cluster.local }"},
		{name: "plugin defaults", cache: "{}", want: &plan.DNSCache{}, corefile: "cache"},
		{name: "cache 10 with lines", cache: "{ttl: 10s, success: {capacity: 2048}, denial: {ttl: 5s, minTTL: 0s}, keepTTL: true}",
			want:     &plan.DNSCache{Success: cl(2048, 10*time.Second, 0), Denial: cl(0, 5*time.Second, -1), KeepTTL: true},
			corefile: "cache { success 2048 10 5; denial 10000 5 0; keepttl }"},
		{name: "unknown preset", cache: "{preset: kube}", wantErr: []string{"spec.dns.cache.preset", `"kube": expected coredns, kubeadm, kubeadm-1.31`}},
		{name: "zero TTL", cache: "{ttl: 0s}", wantErr: []string{"spec.dns.cache.ttl", "whole seconds from 1s"}},
		{name: "fractional minimum", cache: "{denial: {minTTL: 1500ms}}", wantErr: []string{"spec.dns.cache.denial.minTTL"}},
		{name: "zero capacity", cache: "{success: {capacity: 0}}", wantErr: []string{"spec.dns.cache.success.capacity", "expected 1 to"}},
		{name: "unknown field", cache: "{sucess: {capacity: 10}}", wantErr: []string{"spec.dns.cache.sucess"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := baseScenario
			if tt.cache != "" {
				spec = strings.Replace(spec, "  duration: 10s\n", "  duration: 10s\n  dns: {ttl: 30s, cache: "+tt.cache+"}\n", 1)
			}
			p, err := scenario.Load("f.yaml", []byte(objects(2)+spec))
			if tt.wantErr != nil {
				if err == nil {
					t.Fatal("Load succeeded, want an error")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, p.DNS.Cache); diff != "" {
				t.Errorf("plan's cache (-want +got):\n%s", diff)
			}
			if tt.want != nil && p.DNS.Cache.String() != tt.corefile {
				t.Errorf("Corefile form %q, want %q", p.DNS.Cache.String(), tt.corefile)
			}
		})
	}
}
