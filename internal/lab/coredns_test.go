package lab

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/coredns"
)

// TestCoreDNSConfig: the lab's DNS settings become CoreDNS's (what
// clusterdns's zero values mean, not the Corefile's kubeadm defaults), and
// the ones CoreDNS cannot take are errors naming them.
func TestCoreDNSConfig(t *testing.T) {
	rc := &rest.Config{Host: "https://10.244.255.254:6443"}
	cache := clusterdns.KubeadmCache(clusterdns.DefaultZone)
	for _, tt := range []struct {
		name    string
		dns     clusterdns.Config
		want    coredns.Config
		wantErr string
	}{
		{name: "zero: pinlab's defaults, no cache", want: coredns.Config{REST: rc, TTL: 5 * time.Second, Pods: clusterdns.PodsDisabled, NoCache: true}},
		{name: "ttl 0 asked", dns: clusterdns.Config{TTL: -1}, want: coredns.Config{REST: rc, TTL: -1, Pods: clusterdns.PodsDisabled, NoCache: true}},
		{name: "kubeadm-like", dns: clusterdns.Config{TTL: 30 * time.Second, Pods: clusterdns.PodsInsecure, Cache: cache, FixedOrder: true},
			want: coredns.Config{REST: rc, TTL: 30 * time.Second, Pods: clusterdns.PodsInsecure, Cache: cache, FixedOrder: true}},
		{name: "verified pods, another zone", dns: clusterdns.Config{TTL: 10 * time.Second, Pods: clusterdns.PodsVerified, Zone: "lab.local."},
			want: coredns.Config{REST: rc, TTL: 10 * time.Second, Pods: clusterdns.PodsVerified, Zone: "lab.local.", NoCache: true}},
		{name: "no reverse zones", dns: clusterdns.Config{NoReverseZones: true}, wantErr: "DNS.NoReverseZones"},
		{name: "another DNS Service", dns: clusterdns.Config{DNSService: types.NamespacedName{Namespace: "dns", Name: "coredns"}}, wantErr: "DNS.DNSService"},
		{name: "TTL above an hour", dns: clusterdns.Config{TTL: 2 * time.Hour}, wantErr: "DNS.TTL 2h0m0s"},
		{name: "sub-second TTL", dns: clusterdns.Config{TTL: 300 * time.Millisecond}, wantErr: "DNS.TTL 300ms"},
		{name: "sub-second cache TTL", dns: clusterdns.Config{Cache: &clusterdns.CacheConfig{Success: clusterdns.CacheClass{MaxTTL: time.Millisecond}}}, wantErr: "DNS.Cache"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := coreDNSConfig(Config{DNS: tt.dns, API: &API{CoreDNS: coredns.Config{REST: rc}}})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.REST != rc {
				t.Errorf("REST %p, want API.CoreDNS's %p", got.REST, rc)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(coredns.Config{}, "QueryLog", "REST"), cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("CoreDNS config (-want +got):\n%s", diff)
			}
		})
	}
}
