package labrun

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
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
			cfg := labConfig(runner.Setup{DNS: plan.DNS{TTL: 30 * time.Second, Cache: tt.cache}})
			if diff := cmp.Diff(tt.want, cfg.DNS.Cache); diff != "" {
				t.Errorf("cluster DNS cache (-want +got):\n%s", diff)
			}
		})
	}
}

// TestForDataplane: under the real dataplane, ipvs variants are left out
// with a note, iptables variants on nftables are named, and a plan of ipvs
// variants only is a usage error; pinlab's dataplane runs the plan as it
// is.
func TestForDataplane(t *testing.T) {
	variant := func(name, mode string) plan.Variant {
		return plan.Variant{Name: name, Cluster: plan.Cluster{ProxyMode: mode}}
	}
	tests := []struct {
		name      string
		dataplane lab.Dataplane
		variants  []plan.Variant
		want      []string // the variants kept
		notes     []string // each note's start
		wantErr   string
	}{
		{name: "pinlab's dataplane", dataplane: lab.DataplanePinlab, variants: []plan.Variant{variant("ipvs", "ipvs")}, want: []string{"ipvs"}},
		{name: "no ipvs", dataplane: lab.DataplaneKubeProxyNFTables, variants: []plan.Variant{variant("a", "nftables"), variant("b", "")}, want: []string{"a", "b"}},
		{name: "iptables on nftables", dataplane: lab.DataplaneKubeProxyNFTables, variants: []plan.Variant{variant("a", "iptables"), variant("b", "nftables")}, want: []string{"a", "b"},
			notes: []string{"variant a: its proxy mode runs as the real kube-proxy's nftables mode"}},
		{name: "one ipvs", dataplane: lab.DataplaneKubeProxyNFTables, variants: []plan.Variant{variant("iptables", "iptables"), variant("ipvs", "ipvs"), variant("nftables", "nftables")},
			want: []string{"iptables", "nftables"}, notes: []string{
				"leaving out variant ipvs: proxy mode ipvs, which the real kube-proxy does not run here (--dataplane kube-proxy-nftables is nftables mode)",
				"variant iptables: its proxy mode runs as the real kube-proxy's nftables mode (--dataplane kube-proxy-nftables)"}},
		{name: "only ipvs", dataplane: lab.DataplaneKubeProxyIPTables, variants: []plan.Variant{variant("ipvs", "ipvs")}, wantErr: "variant ipvs: proxy mode ipvs, which the real kube-proxy does not run here (--dataplane kube-proxy-iptables is iptables mode)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var notes strings.Builder
			p, err := forDataplane(&plan.Plan{Name: "kube-proxy-modes", Variants: tt.variants}, tt.dataplane, &notes)
			if tt.wantErr != "" {
				if !exit.IsUsage(err) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("forDataplane: %v, want a usage error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, p.VariantNames()); diff != "" {
				t.Errorf("variants kept (-want +got):\n%s", diff)
			}
			got := strings.Split(strings.TrimSuffix(notes.String(), "\n"), "\n")
			if notes.Len() == 0 {
				got = nil
			}
			if len(got) != len(tt.notes) {
				t.Fatalf("notes %q, want %d", got, len(tt.notes))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.notes[i]) {
					t.Errorf("note %q, want it to start with %q", got[i], tt.notes[i])
				}
			}
		})
	}
}
