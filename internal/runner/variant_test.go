package runner

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// TestLabConfigDNSCache: the plan's cache plugin reaches the lab's
// cluster DNS as the same Corefile settings; none stays none.
func TestLabConfigDNSCache(t *testing.T) {
	tests := []struct {
		name  string
		cache *plan.DNSCache
		want  *clusterdns.CacheConfig
	}{
		{name: "none"},
		{name: "kubeadm: the cluster zone disabled",
			cache: &plan.DNSCache{Success: plan.DNSCacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}},
				Denial: plan.DNSCacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}}},
			want: clusterdns.KubeadmCache(clusterdns.DefaultZone)},
		{name: "kubeadm-1.31",
			cache: &plan.DNSCache{Success: plan.DNSCacheClass{MaxTTL: 30 * time.Second}, Denial: plan.DNSCacheClass{MaxTTL: 30 * time.Second}},
			want:  clusterdns.KubeadmCacheV131()},
		{name: "every setting",
			cache: &plan.DNSCache{Success: plan.DNSCacheClass{Capacity: 2048, MaxTTL: time.Minute, MinTTL: -1}, Denial: plan.DNSCacheClass{MinTTL: 2 * time.Second}, KeepTTL: true},
			want: &clusterdns.CacheConfig{Success: clusterdns.CacheClass{Capacity: 2048, MaxTTL: time.Minute, MinTTL: -1},
				Denial: clusterdns.CacheClass{MinTTL: 2 * time.Second}, KeepTTL: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &variantRun{plan: &plan.Plan{DNS: plan.DNS{TTL: 30 * time.Second, Cache: tt.cache}}}
			cfg := r.labConfig(stats.NewRecorder(time.Now()), nil)
			if diff := cmp.Diff(tt.want, cfg.DNS.Cache); diff != "" {
				t.Errorf("cluster DNS cache (-want +got):\n%s", diff)
			}
		})
	}
}
