package coredns

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestCorefile renders Corefiles and compares them with testdata/NAME.golden
// (run with -update after a deliberate change).
func TestCorefile(t *testing.T) {
	base := corefile{
		Addr:   netip.MustParseAddrPort("10.96.0.53:53"),
		Health: netip.MustParseAddrPort("127.0.0.1:8080"), Ready: netip.MustParseAddrPort("127.0.0.1:8181"),
		Metrics: netip.MustParseAddrPort("127.0.0.1:9153"),
		Zone:    "cluster.local", TTL: 30, Kubeconfig: "/state/kubeconfig", Pods: "insecure",
	}
	base.Cache = mustCacheBlock(t, nil, false)
	lameduck := base
	lameduck.Lameduck, lameduck.Log = "5s", true
	// A lab's settings: pods verified, no loadbalance, an explicit cache
	// (kubeadm's "cache 30" before #128359, keepttl), dnstap.
	lab := base
	lab.Pods, lab.FixedOrder, lab.Dnstap, lab.TTL = "verified", true, "/state/dnstap.sock", 0
	lab.Cache = mustCacheBlock(t, &clusterdns.CacheConfig{
		Success: clusterdns.CacheClass{MaxTTL: 30 * time.Second},
		Denial:  clusterdns.CacheClass{Capacity: 512, MaxTTL: 30 * time.Second, MinTTL: -1, Disable: []string{"cluster.local", "in-addr.arpa"}},
		KeepTTL: true,
	}, false)
	bare := base
	bare.Pods, bare.Cache = "disabled", mustCacheBlock(t, nil, true)
	for _, tt := range []struct {
		name string
		cf   corefile
	}{
		{"kubeadm", base},
		{"lameduck-log", lameduck},
		{"lab-settings", lab},
		{"no-cache", bare},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cf.String()
			path := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("Corefile (-want +got):\n%s", diff)
			}
		})
	}
}

func mustCacheBlock(t *testing.T, c *clusterdns.CacheConfig, none bool) string {
	t.Helper()
	b, err := cacheBlock(c, none, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCacheBlockRefuses: settings the cache plugin cannot take are errors
// naming them, not Corefiles CoreDNS would refuse at start.
func TestCacheBlockRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    clusterdns.CacheConfig
		want string
	}{
		{"sub-second TTL", clusterdns.CacheConfig{Success: clusterdns.CacheClass{MaxTTL: 500 * time.Millisecond}}, "cache success: TTL 500ms"},
		{"negative capacity", clusterdns.CacheConfig{Denial: clusterdns.CacheClass{Capacity: -1}}, "cache denial: capacity -1"},
		{"negative TTL", clusterdns.CacheConfig{Denial: clusterdns.CacheClass{MaxTTL: -time.Second}}, "cache denial: capacity 0, TTL -1s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cacheBlock(&tt.c, false, "cluster.local")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("cacheBlock: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestCacheBlockKubeadm: clusterdns's kubeadm presets become the cache
// block of the Corefile they copy, every value written out: v1.32 and
// later disable both caches for the cluster zone, v1.31 does not.
func TestCacheBlockKubeadm(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    *clusterdns.CacheConfig
		want []string
	}{
		{"kubeadm", clusterdns.KubeadmCache(clusterdns.DefaultZone), []string{"    cache {",
			"       success 10000 30 5", "       disable success cluster.local",
			"       denial 10000 30 5", "       disable denial cluster.local", "    }"}},
		{"kubeadm v1.31", clusterdns.KubeadmCacheV131(), []string{"    cache {",
			"       success 10000 30 5", "       denial 10000 30 5", "    }"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(strings.Join(tt.want, "\n"), mustCacheBlock(t, tt.c, false)); diff != "" {
				t.Errorf("cache block (-want +got):\n%s", diff)
			}
		})
	}
}
