package clusterdns_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// fakeClock is the clock the tests give the package through SetNow, so
// that TTLs pass without sleeping.
type fakeClock struct{ ns atomic.Int64 }

// useFakeClock installs a clock standing at goldenSerial until t ends; it
// must be called before the fixture starts its informers.
func useFakeClock(t *testing.T) *fakeClock {
	c := new(fakeClock)
	c.ns.Store(goldenSerial.UnixNano())
	clusterdns.SetNow(t, c.now)
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// kubeadmV131DNS is kubeadm's Corefile up to v1.31: "ttl 30" and a bare
// "cache 30", which keeps answers in the cluster zone.
var kubeadmV131DNS = clusterdns.Config{TTL: 30 * time.Second, Cache: clusterdns.KubeadmCacheV131(), FixedOrder: true}

// TestCachePluginKeepsRemovedEndpoint: behind kubeadm v1.31's "cache
// 30", an endpoint removed from the EndpointSlice stays in the answer, its
// TTL counting down, until the cached reply expires; the next query then
// drops it. Behind kubeadm's current Corefile, which disables both caches
// for cluster.local, and without the cache plugin, the same change shows
// at once.
func TestCachePluginKeepsRemovedEndpoint(t *testing.T) {
	tests := []struct {
		name  string
		cache *clusterdns.CacheConfig
		kept  bool
	}{
		{name: "kubeadm v1.31: cache 30", cache: clusterdns.KubeadmCacheV131(), kept: true},
		{name: "kubeadm: cache 30, cluster.local disabled", cache: clusterdns.KubeadmCache(clusterdns.DefaultZone)},
		{name: "no cache plugin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := useFakeClock(t)
			cfg := kubeadmV131DNS
			cfg.Cache = tt.cache
			fx := newFixture(t, cfg, referenceObjects()...)
			all := []string{"172.0.0.2", "172.0.0.3", "172.0.0.4"}
			checkA(t, fx, tn("hdls"), 30, all)

			// The pod behind 172.0.0.3 is gone: its endpoint leaves the slice.
			es := endpointSlice("testns", "hdls", "hdls-v4", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{httpSlicePort},
				endpoint("172.0.0.2", "", isReady), endpoint("172.0.0.4", "web-0", isReady))
			if _, err := fx.client.DiscoveryV1().EndpointSlices("testns").Update(t.Context(), es, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			fx.untilStored(t, &discoveryv1.EndpointSlice{}, "testns/hdls-v4", func(obj any) bool {
				return obj != nil && len(obj.(*discoveryv1.EndpointSlice).Endpoints) == 2
			})
			left := []string{"172.0.0.2", "172.0.0.4"}
			if !tt.kept {
				checkA(t, fx, tn("hdls"), 30, left)
				return
			}
			checkA(t, fx, tn("hdls"), 30, all) // same second: TTL 30
			clock.advance(12 * time.Second)
			checkA(t, fx, tn("hdls"), 18, all)
			clock.advance(17*time.Second + 999*time.Millisecond) // 29.999s: 1s left
			checkA(t, fx, tn("hdls"), 1, all)
			clock.advance(time.Millisecond) // 30s: expired
			checkA(t, fx, tn("hdls"), 30, left)
		})
	}
}

// TestCachePluginKeepsNegativeAnswer: a StatefulSet pod's name asked
// before the pod is ready is NXDOMAIN (kubernetes#92559), and the cache
// plugin keeps that NXDOMAIN for the denial TTL, the SOA's TTL capped,
// after the pod turned ready.
func TestCachePluginKeepsNegativeAnswer(t *testing.T) {
	tests := []struct {
		name   string
		cfg    clusterdns.Config
		denial time.Duration
	}{
		{name: "kubeadm: ttl 30, cache 30", cfg: kubeadmV131DNS, denial: 30 * time.Second},
		{name: "plugin TTL 5s behind cache 30", cfg: clusterdns.Config{Cache: clusterdns.KubeadmCacheV131()}, denial: 5 * time.Second},
		{name: "denial capped at 10s", cfg: clusterdns.Config{TTL: 30 * time.Second,
			Cache: &clusterdns.CacheConfig{Denial: clusterdns.CacheClass{MaxTTL: 10 * time.Second}}}, denial: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := useFakeClock(t)
			fx := newFixture(t, tt.cfg, referenceObjects()...)
			qname := "web-9." + tn("hdls") // not ready yet
			secs := uint32(tt.denial / time.Second)
			checkNXDOMAIN(t, fx, qname, secs)

			es := endpointSlice("testns", "hdls", "hdls-v4", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{httpSlicePort},
				endpoint("172.0.0.2", "", isReady), endpoint("172.0.0.9", "web-9", isReady))
			if _, err := fx.client.DiscoveryV1().EndpointSlices("testns").Update(t.Context(), es, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			fx.untilStored(t, &discoveryv1.EndpointSlice{}, "testns/hdls-v4", func(obj any) bool {
				return obj != nil && len(obj.(*discoveryv1.EndpointSlice).Endpoints) == 2
			})
			clock.advance(tt.denial - time.Second)
			checkNXDOMAIN(t, fx, qname, 1)
			clock.advance(time.Second)
			checkA(t, fx, qname, uint32(max(tt.cfg.TTL, clusterdns.DefaultTTL)/time.Second), []string{"172.0.0.9"})
		})
	}
}

// TestCachePluginTTLRules: the TTL a reply is kept for and sent with is
// its smallest record TTL raised to the minimum and capped at the
// maximum, on every record, the first reply included.
func TestCachePluginTTLRules(t *testing.T) {
	tests := []struct {
		name      string
		cfg       clusterdns.Config
		qname     string
		qtype     uint16
		wantTTL   uint32
		wantRcode int
	}{
		{name: "plugin TTL 5s under cache 30", cfg: clusterdns.Config{Cache: clusterdns.KubeadmCacheV131()},
			qname: tn("svc1"), qtype: dns.TypeA, wantTTL: 5},
		{name: "TTL 0 raised to the 5s minimum", cfg: clusterdns.Config{TTL: -1, Cache: &clusterdns.CacheConfig{}},
			qname: tn("svc1"), qtype: dns.TypeA, wantTTL: 5},
		{name: "TTL 0 without a minimum", cfg: clusterdns.Config{TTL: -1, Cache: &clusterdns.CacheConfig{Success: clusterdns.CacheClass{MinTTL: -1}}},
			qname: tn("svc1"), qtype: dns.TypeA, wantTTL: 0},
		{name: "TTL 1h capped at 30s", cfg: clusterdns.Config{TTL: time.Hour, Cache: clusterdns.KubeadmCacheV131()},
			qname: tn("svc1"), qtype: dns.TypeA, wantTTL: 30},
		{name: "minimum above the record TTL", cfg: clusterdns.Config{Cache: &clusterdns.CacheConfig{Success: clusterdns.CacheClass{MinTTL: 20 * time.Second}}},
			qname: tn("svc1"), qtype: dns.TypeA, wantTTL: 20},
		{name: "schema TXT 28800 capped at 30s", cfg: clusterdns.Config{Cache: clusterdns.KubeadmCacheV131()},
			qname: "dns-version.cluster.local.", qtype: dns.TypeTXT, wantTTL: 30},
		{name: "schema TXT under the default 3600s cap", cfg: clusterdns.Config{Cache: &clusterdns.CacheConfig{}},
			qname: "dns-version.cluster.local.", qtype: dns.TypeTXT, wantTTL: 3600},
		{name: "SRV and its glue take one TTL", cfg: clusterdns.Config{TTL: time.Hour, Cache: &clusterdns.CacheConfig{}},
			qname: "_http._tcp." + tn("hdls"), qtype: dns.TypeSRV, wantTTL: 3600},
		{name: "NXDOMAIN keeps its SOA's TTL (at most 300s)", cfg: clusterdns.Config{TTL: time.Hour, Cache: &clusterdns.CacheConfig{}},
			qname: tn("svc0"), qtype: dns.TypeA, wantTTL: 300, wantRcode: dns.RcodeNameError},
		{name: "NODATA SOA TTL", cfg: clusterdns.Config{TTL: time.Hour, Cache: &clusterdns.CacheConfig{Denial: clusterdns.CacheClass{MaxTTL: 60 * time.Second}}},
			qname: tn("svc1"), qtype: dns.TypeAAAA, wantTTL: 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			useFakeClock(t)
			fx := newFixture(t, tt.cfg, referenceObjects()...)
			got := fx.ask(t, tt.qname, tt.qtype, true, 0)
			if got.Rcode != tt.wantRcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[got.Rcode], dns.RcodeToString[tt.wantRcode])
			}
			n := 0
			for _, sec := range [][]dns.RR{got.Answer, got.Ns, got.Extra} {
				for _, rr := range sec {
					if rr.Header().Rrtype == dns.TypeOPT {
						continue
					}
					n++
					if rr.Header().Ttl != tt.wantTTL {
						t.Errorf("TTL %d, want %d: %v", rr.Header().Ttl, tt.wantTTL, rr)
					}
				}
			}
			if n == 0 {
				t.Fatal("no records")
			}
		})
	}
}

// TestCachePluginServing: what a cached reply is served with.
func TestCachePluginServing(t *testing.T) {
	t.Run("keepttl serves the stored TTL until expiry", func(t *testing.T) {
		clock := useFakeClock(t)
		cfg := kubeadmV131DNS
		cfg.Cache = &clusterdns.CacheConfig{KeepTTL: true, Success: clusterdns.CacheClass{MaxTTL: 30 * time.Second}}
		fx := newFixture(t, cfg, referenceObjects()...)
		checkA(t, fx, tn("svc1"), 30, []string{"10.0.0.1"})
		changeClusterIP(t, fx, "10.0.0.21")
		clock.advance(29 * time.Second)
		checkA(t, fx, tn("svc1"), 30, []string{"10.0.0.1"})
		clock.advance(time.Second)
		checkA(t, fx, tn("svc1"), 30, []string{"10.0.0.21"})
	})
	t.Run("any case hits the reply as first asked", func(t *testing.T) {
		useFakeClock(t)
		fx := newFixture(t, kubeadmV131DNS, referenceObjects()...)
		fx.ask(t, "SVC1.testns.svc.cluster.local.", dns.TypeA, false, 0)
		got := fx.ask(t, tn("svc1"), dns.TypeA, false, 0)
		if diff := cmp.Diff([]string{"SVC1.testns.svc.cluster.local.\t30\tIN\tA\t10.0.0.1"}, rrStrings(got.Answer)); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
		if got.Question[0].Name != tn("svc1") {
			t.Errorf("question %s, want it as asked", got.Question[0].Name)
		}
	})
	t.Run("ExternalName CNAME alone is not kept", func(t *testing.T) {
		useFakeClock(t)
		fx := newFixture(t, kubeadmV131DNS, referenceObjects()...)
		want := func(target string) dnsCase {
			return dnsCase{name: target, qname: tn("ext"), qtype: dns.TypeA, answer: []string{tn("ext") + " 30 IN CNAME " + target}}
		}
		checkReply(t, fx.ask(t, tn("ext"), dns.TypeA, true, 0), want("ext.example.com."))
		if _, err := fx.client.CoreV1().Services("testns").Update(t.Context(), externalService("testns", "ext", "other.example.com"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		fx.untilStored(t, &corev1.Service{}, "testns/ext", func(obj any) bool {
			return obj != nil && obj.(*corev1.Service).Spec.ExternalName == "other.example.com"
		})
		checkReply(t, fx.ask(t, tn("ext"), dns.TypeA, true, 0), want("other.example.com."))
	})
	t.Run("DO bit keys its own reply", func(t *testing.T) {
		useFakeClock(t)
		fx := newFixture(t, kubeadmV131DNS, referenceObjects()...)
		checkA(t, fx, tn("svc1"), 30, []string{"10.0.0.1"})
		changeClusterIP(t, fx, "10.0.0.22")
		m := new(dns.Msg)
		m.SetQuestion(tn("svc1"), dns.TypeA)
		m.SetEdns0(1232, true)
		got := exchange(t, fx.srv, m, false)
		if diff := cmp.Diff([]string{tn("svc1") + "\t30\tIN\tA\t10.0.0.22"}, rrStrings(got.Answer)); diff != "" {
			t.Errorf("answer with DO (-want +got):\n%s", diff)
		}
	})
}

// TestCachePluginCapacity: a cache keeps at most 256 shards of
// max(capacity/256, 4) replies; made-up names evict at random.
func TestCachePluginCapacity(t *testing.T) {
	useFakeClock(t)
	fx := newFixture(t, clusterdns.Config{Cache: &clusterdns.CacheConfig{Denial: clusterdns.CacheClass{Capacity: 1}}}, referenceObjects()...)
	const names = 3000
	for i := range names {
		fx.ask(t, fmt.Sprintf("nope-%d.testns.svc.cluster.local.", i), dns.TypeA, false, 0)
	}
	success, denial := clusterdns.CachedReplies(fx.srv)
	if denial > 256*4 || denial < 256 || success != 0 {
		t.Errorf("%d positive and %d negative replies kept after %d NXDOMAINs, want none and 256..1024", success, denial, names)
	}
}

func TestNewRejectsBadCache(t *testing.T) {
	tests := []struct {
		name  string
		cache clusterdns.CacheConfig
	}{
		{"negative capacity", clusterdns.CacheConfig{Success: clusterdns.CacheClass{Capacity: -1}}},
		{"negative TTL", clusterdns.CacheConfig{Denial: clusterdns.CacheClass{MaxTTL: -time.Second}}},
		{"TTL beyond 2^31 seconds", clusterdns.CacheConfig{Denial: clusterdns.CacheClass{MaxTTL: 1 << 62}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := clusterdns.New(newFactory(), clusterdns.Config{Cache: &tt.cache}); err == nil {
				t.Fatal("New succeeded, want an error")
			}
		})
	}
}

// checkA asks qname A over TCP and compares the addresses, which all carry
// ttl, as a set.
func checkA(t *testing.T, fx *fixture, qname string, ttl uint32, addrs []string) {
	t.Helper()
	want := make([]string, len(addrs))
	for i, a := range addrs {
		want[i] = fmt.Sprintf("%s %d IN A %s", qname, ttl, a)
	}
	checkReply(t, fx.ask(t, qname, dns.TypeA, true, 0), dnsCase{qname: qname, answer: want})
}

// checkNXDOMAIN asks qname A and wants NXDOMAIN with the SOA at ttl.
func checkNXDOMAIN(t *testing.T, fx *fixture, qname string, ttl uint32) {
	t.Helper()
	got := fx.ask(t, qname, dns.TypeA, true, 0)
	if got.Rcode != dns.RcodeNameError || len(got.Ns) != 1 {
		t.Fatalf("%s: %s, want NXDOMAIN with the SOA", qname, describe(got))
	}
	h := got.Ns[0].Header()
	if h.Rrtype != dns.TypeSOA || h.Ttl != ttl {
		t.Errorf("authority %v, want the SOA with TTL %d", got.Ns[0], ttl)
	}
}

// changeClusterIP gives svc1 a new ClusterIP and waits until the informer
// cache has it.
func changeClusterIP(t *testing.T, fx *fixture, ip string) {
	t.Helper()
	if _, err := fx.client.CoreV1().Services("testns").Update(t.Context(), clusterIPService("testns", "svc1", []string{ip}, httpPort), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &corev1.Service{}, "testns/svc1", func(obj any) bool {
		return obj != nil && obj.(*corev1.Service).Spec.ClusterIP == ip
	})
}

// TestCachePluginGolden: whole replies from the cache plugin, 12s after
// they were stored, as dig prints them (TTLs counted down).
func TestCachePluginGolden(t *testing.T) {
	clock := useFakeClock(t)
	fx := newFixture(t, kubeadmV131DNS, referenceObjects()...)
	tests := []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"cache-countdown-headless-a", tn("hdls"), dns.TypeA},
		{"cache-countdown-srv-glue", "_http._tcp." + tn("hdls"), dns.TypeSRV},
		{"cache-countdown-nxdomain", "web-9." + tn("hdls"), dns.TypeA},
	}
	for _, tt := range tests {
		fx.ask(t, tt.qname, tt.qtype, false, 0) // stored now
	}
	clock.advance(12 * time.Second)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tt.qname, tt.qtype)
			m.Id = 4242
			w := newRecorder(false)
			fx.srv.ServeDNS(w, m)
			if w.err != nil {
				t.Fatal(w.err)
			}
			got := fmt.Sprintf(";; udp %s %s, 12s after it was cached\n%s\n;; MSG SIZE  rcvd: %d\n",
				tt.qname, dns.TypeToString[tt.qtype], w.msg, w.size)
			checkGolden(t, filepath.Join("testdata", tt.name+".golden"), got)
		})
	}
}

// TestCachePluginDisable: kubeadm v1.37.2's "cache 30 { disable success
// cluster.local; disable denial cluster.local }" (its zones here in other
// spellings, which name the same zone) keeps nothing in the
// zone, so a removed endpoint leaves the answer at once, but the TTLs are
// still capped at 30 (the dns-version TXT's 28800 too), as CoreDNS caps
// before it decides not to keep; the reverse zones are still cached.
func TestCachePluginDisable(t *testing.T) {
	useFakeClock(t)
	cfg := kubeadmV131DNS
	cfg.Cache = clusterdns.KubeadmCacheV131()
	cfg.Cache.Success.Disable = []string{"Cluster.Local"}
	cfg.Cache.Denial.Disable = []string{"cluster.local."}
	fx := newFixture(t, cfg, referenceObjects()...)
	checkA(t, fx, tn("hdls"), 30, []string{"172.0.0.2", "172.0.0.3", "172.0.0.4"})
	es := endpointSlice("testns", "hdls", "hdls-v4", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{httpSlicePort},
		endpoint("172.0.0.2", "", isReady), endpoint("172.0.0.4", "web-0", isReady))
	if _, err := fx.client.DiscoveryV1().EndpointSlices("testns").Update(t.Context(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &discoveryv1.EndpointSlice{}, "testns/hdls-v4", func(obj any) bool {
		return obj != nil && len(obj.(*discoveryv1.EndpointSlice).Endpoints) == 2
	})
	checkA(t, fx, tn("hdls"), 30, []string{"172.0.0.2", "172.0.0.4"})
	txt := fx.ask(t, "dns-version.cluster.local.", dns.TypeTXT, true, 0)
	if len(txt.Answer) != 1 || txt.Answer[0].Header().Ttl != 30 {
		t.Errorf("dns-version TXT: %s, want one record with TTL 30 (capped)", describe(txt))
	}

	// In-addr.arpa is not disabled: svc1's PTR is kept after svc1 moves.
	ptr := func() string {
		r := fx.ask(t, "1.0.0.10.in-addr.arpa.", dns.TypePTR, true, 0)
		return describe(r)
	}
	before := ptr()
	changeClusterIP(t, fx, "10.0.0.99")
	if after := ptr(); after != before {
		t.Errorf("PTR 10.0.0.1 after svc1 moved: %s, want the kept reply %s", after, before)
	}
}
