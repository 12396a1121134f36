package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/labup"
)

// TestLabUpDNSCacheFlags: the --dns-cache flags give the cluster DNS
// CoreDNS's cache plugin as the Corefile would; mistakes are usage errors.
func TestLabUpDNSCacheFlags(t *testing.T) {
	class := func(capacity int, maxTTL, minTTL time.Duration) clusterdns.CacheClass {
		return clusterdns.CacheClass{Capacity: capacity, MaxTTL: maxTTL, MinTTL: minTTL}
	}
	tests := []struct {
		name    string
		args    []string
		want    *clusterdns.CacheConfig
		wantErr string
	}{
		{name: "off by default"},
		{name: "kubeadm: cluster.local not kept", args: []string{"--dns-cache", "kubeadm"}, want: &clusterdns.CacheConfig{
			Success: clusterdns.CacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}},
			Denial:  clusterdns.CacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}}}},
		{name: "kubeadm-1.31: bare cache 30", args: []string{"--dns-cache", "kubeadm-1.31"}, want: &clusterdns.CacheConfig{Success: class(0, 30*time.Second, 0), Denial: class(0, 30*time.Second, 0)}},
		{name: "plugin defaults", args: []string{"--dns-cache", "coredns"}, want: &clusterdns.CacheConfig{}},
		{name: "cache 10", args: []string{"--dns-cache", "10s"},
			want: &clusterdns.CacheConfig{Success: class(0, 10*time.Second, 0), Denial: class(0, 10*time.Second, 0)}},
		{name: "success and denial lines", args: []string{"--dns-cache", "kubeadm-1.31", "--dns-cache-success", "2048", "--dns-cache-denial", "512,5s,0s", "--dns-cache-keepttl"},
			want: &clusterdns.CacheConfig{Success: class(2048, 30*time.Second, 0), Denial: class(512, 5*time.Second, -1), KeepTTL: true}},
		{name: "kubeadm's lines tuned, its zone still disabled", args: []string{"--dns-cache", "kubeadm", "--dns-cache-success", "2048"},
			want: &clusterdns.CacheConfig{Success: clusterdns.CacheClass{Capacity: 2048, MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}},
				Denial: clusterdns.CacheClass{MaxTTL: 30 * time.Second, Disable: []string{"cluster.local"}}}},
		{name: "unknown preset", args: []string{"--dns-cache", "on"}, wantErr: `--dns-cache "on": expected off, kubeadm, kubeadm-1.31, coredns or a TTL cap`},
		{name: "zero TTL cap", args: []string{"--dns-cache", "0s"}, wantErr: `--dns-cache "0s"`},
		{name: "fractional TTL", args: []string{"--dns-cache", "1.5s"}, wantErr: `--dns-cache "1.5s"`},
		{name: "tuning without the cache", args: []string{"--dns-cache-keepttl"}, wantErr: "add --dns-cache"},
		{name: "bad capacity", args: []string{"--dns-cache", "kubeadm", "--dns-cache-success", "many"}, wantErr: `--dns-cache-success "many": the capacity`},
		{name: "too many values", args: []string{"--dns-cache", "kubeadm", "--dns-cache-denial", "1,2s,3s,4s"}, wantErr: "too many values"},
		{name: "bad minimum", args: []string{"--dns-cache", "kubeadm", "--dns-cache-denial", "100,5s,-1s"}, wantErr: "-1s: whole seconds from 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLabUp(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !exit.IsUsage(err) {
					t.Fatalf("error %v, want a usage error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cache, err := labup.ParseDNSCache(got.DNSCache, got.DNSCacheSuccess, got.DNSCacheDenial, got.DNSCacheKeepTTL)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, cache); diff != "" {
				t.Errorf("cache plugin (-want +got):\n%s", diff)
			}
		})
	}
}
