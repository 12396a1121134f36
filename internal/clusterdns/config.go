package clusterdns

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pinlab/pinlab/internal/loopback"
)

// Defaults used when the matching Config field is zero.
const (
	// DefaultZone is the cluster domain (kubelet's --cluster-domain default).
	DefaultZone = "cluster.local."
	// DefaultTTL is the TTL of every record, as in CoreDNS's kubernetes plugin.
	DefaultTTL = 5 * time.Second
	// DefaultAddr is where Start listens, UDP and TCP.
	DefaultAddr = "127.96.0.10:53"
	// MaxTTL is the largest TTL CoreDNS accepts ("ttl" option range [0, 3600]).
	MaxTTL = time.Hour
)

// SchemaVersion is the Kubernetes DNS specification version served in the
// dns-version.<zone> TXT record.
const SchemaVersion = "1.1.0"

// versionTTL is the fixed TTL of the dns-version TXT record, in seconds.
const versionTTL = 28800

// DefaultDNSService is the DNS Service named in NS answers (kubeadm's name).
var DefaultDNSService = types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}

// Config configures a Server. The zero value serves cluster.local. and the
// reverse zones with a 5s TTL on 127.96.0.10:53, shuffling address records,
// with no records for pods.
type Config struct {
	// Zone is the cluster domain served, e.g. "cluster.local."; a trailing
	// dot is optional and case does not matter. Empty means DefaultZone.
	Zone string

	// TTL is the TTL of every record and the negative-caching time (SOA
	// MINIMUM); it is truncated to whole seconds. Zero means DefaultTTL (5s,
	// CoreDNS's default; kubeadm configures 30s). A negative TTL asks for
	// TTL 0 (no caching). Values above MaxTTL are an error.
	TTL time.Duration

	// Pods selects how names under <ns>.pod.<zone> are answered, like the
	// kubernetes plugin's "pods" option. Empty means PodsDisabled, CoreDNS's
	// default; kubeadm's Corefile uses PodsInsecure. PodsVerified also
	// registers a Pod informer with the factory.
	Pods PodMode

	// NoReverseZones turns the reverse zones off. By default the Server is
	// also authoritative for in-addr.arpa. and ip6.arpa., as CoreDNS is with
	// kubeadm's "kubernetes cluster.local in-addr.arpa ip6.arpa": PTR
	// records name the Services and endpoints of cluster IPs. True answers
	// REFUSED there, as for every other name outside the zone.
	NoReverseZones bool

	// FixedOrder keeps A/AAAA records in a stable order (ClusterIPs in
	// spec.clusterIPs order, endpoints in EndpointSlice name then list
	// order). False, the default, shuffles them in every answer like
	// CoreDNS's loadbalance plugin in kubeadm's Corefile.
	FixedOrder bool

	// Cache, if not nil, puts CoreDNS's cache plugin in front of the
	// answers, as kubeadm's Corefile does ("cache 30"): a reply is kept by
	// question (name in any case, type, class, DO and CD bits) and
	// answered from there, its TTLs counting down, until it expires,
	// whatever changes in the API meanwhile; NXDOMAIN and NODATA replies
	// too, except in the zones its classes disable. Nil, the default, is
	// the kubernetes plugin alone: every reply reflects the API objects of
	// the moment. See CacheConfig, KubeadmCache (kubeadm v1.32 and later:
	// the cluster zone not kept) and KubeadmCacheV131 (before: kept). The
	// answer memo, which never serves stale answers, is used either way.
	Cache *CacheConfig

	// Addr is the "IP:port" Start binds for both UDP and TCP; the IP must be
	// in 127.0.0.0/8. Empty means DefaultAddr. Port 0 picks one free port
	// for both. If a non-zero port cannot be bound (no permission, or in
	// use), Start falls back to a free port on the same IP and logs it;
	// Server.Addr reports what was bound.
	Addr string

	// DNSService is the DNS Service's own name, used as the NS target of the
	// zone with its ClusterIPs as glue. Zero means DefaultDNSService. If the
	// Service does not exist, NS answers name ns.dns.<zone> at Addr's IP.
	DNSService types.NamespacedName

	// Rand shuffles address records; the Server serialises its use. Nil
	// means math/rand/v2's global source (seeded at random).
	Rand *rand.Rand

	// QueryLog, if not nil, is called once per reply after it was written.
	// It runs synchronously on the serving goroutine, concurrently for
	// concurrent queries, so it must be fast and safe for concurrent use.
	QueryLog func(QueryEvent)

	// Logger receives the few log lines the Server writes. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// CacheConfig configures the emulation of CoreDNS's cache plugin
// (plugin/cache in github.com/coredns/coredns), whose Corefile form is
//
//	cache [TTL] {
//	    success CAPACITY [TTL [MINTTL]]
//	    denial CAPACITY [TTL [MINTTL]]
//	    keepttl
//	}
//
// A reply is kept for its smallest record TTL, raised to MinTTL and capped
// at MaxTTL, and every record in it, first reply included, is sent with
// that TTL (so "cache 30" caps the dns-version TXT's 28800 at 30). A
// cached reply is served while its remaining TTL, the stored one minus the
// whole seconds elapsed, is above 0, with that remaining TTL. SERVFAIL
// (only before the informers sync) is kept 5s, the plugin's servfail
// default; REFUSED is never kept. The zero value is "cache" with the
// plugin's defaults. Not modelled: prefetch and serve_stale (they refresh
// or stretch entries against an upstream that fails or is slow; the
// kubernetes plugin answers at once from memory) and servfail.
type CacheConfig struct {
	// Success is the cache of positive replies (NOERROR with an answer),
	// Denial that of NXDOMAIN and NODATA replies (and SERVFAIL).
	Success, Denial CacheClass
	// KeepTTL serves cached replies with the TTL they were stored with,
	// as the keepttl option; they still expire on time. False, the
	// default, counts the TTL down as CoreDNS does.
	KeepTTL bool
}

// CacheClass is one of the cache plugin's two caches ("success" or
// "denial").
type CacheClass struct {
	// Capacity is how many replies the cache keeps. As in CoreDNS it is
	// split into 256 shards of max(Capacity/256, 4) replies, and a full
	// shard drops a random reply for a new one. Zero means the plugin's
	// default, 10000 (9984 in shards); negative is an error.
	Capacity int
	// MaxTTL caps how long a reply is kept and the TTL it is sent with
	// (the TTL of "cache TTL", of success and of denial); whole seconds,
	// truncated. Zero means the plugin's default, 3600s for Success and
	// 1800s for Denial; negative is an error.
	MaxTTL time.Duration
	// MinTTL is the least time a reply is kept, raising shorter record
	// TTLs (MINTTL); whole seconds, truncated. Zero means the plugin's
	// default, 5s; negative means 0, no minimum (a reply with TTL 0 is
	// then not kept).
	MinTTL time.Duration
	// Disable lists zones (trailing dot optional, any case) whose replies
	// this cache does not keep, as "disable success|denial ZONES...": a
	// name at or below one is answered afresh every time, but its records
	// are still sent with the capped TTL (CoreDNS caps before it decides
	// to keep). Nil keeps replies in every zone.
	Disable []string
}

// KubeadmCacheTTL is the cap of kubeadm's Corefile, "cache 30".
const KubeadmCacheTTL = 30 * time.Second

// KubeadmCache returns the cache plugin as kubeadm's Corefile has it
// since v1.32.0 (kubernetes/kubernetes#128359, "disable caching for
// authoritative zone"; cmd/kubeadm/app/phases/addons/dns/manifests.go,
// v1.32.0 to v1.37.2):
//
//	cache 30 {
//	   disable success ZONE
//	   disable denial ZONE
//	}
//
// Both caches are capped at 30s, the rest is the plugin's defaults, and
// neither keeps a reply in zone, the cluster domain (a trailing dot is
// optional; Disable holds it without, as kubeadm writes it): names there
// are answered afresh every time, their TTLs still capped at 30s, while
// the reverse zones are cached. kubeadm also sets the kubernetes plugin's
// "ttl 30" (Config.TTL). See KubeadmCacheV131 for the older Corefile.
func KubeadmCache(zone string) *CacheConfig {
	c := KubeadmCacheV131()
	zone = strings.TrimSuffix(zone, ".")
	c.Success.Disable, c.Denial.Disable = []string{zone}, []string{zone}
	return c
}

// KubeadmCacheV131 returns the cache plugin as kubeadm's Corefile had it
// up to v1.31, a bare "cache 30" (manifests.go as above, v1.31.0 line
// 180), which clusters created or upgraded by those versions may still
// run: both caches capped at 30s, the rest the plugin's defaults, every
// zone cached. With kubeadm's "ttl 30" answers in the cluster zone are
// then kept 30s; with the default TTL of 5s, 5s.
func KubeadmCacheV131() *CacheConfig {
	return &CacheConfig{
		Success: CacheClass{MaxTTL: KubeadmCacheTTL},
		Denial:  CacheClass{MaxTTL: KubeadmCacheTTL},
	}
}

// PodMode is a value of Config.Pods: how <ip>.<ns>.pod.<zone> names are
// answered (CoreDNS's "pods" option).
type PodMode string

// The pod modes. In every mode the namespace must exist.
const (
	// PodsDisabled answers NXDOMAIN for every name below pod.<zone>.
	PodsDisabled PodMode = "disabled"
	// PodsInsecure answers the address written in the first label
	// (10-240-0-1 or fd00--1) without checking that a Pod has it.
	PodsInsecure PodMode = "insecure"
	// PodsVerified answers only if a Pod in that namespace has the address
	// and has not finished (phase not Succeeded, Failed or Unknown).
	PodsVerified PodMode = "verified"
)

// QueryEvent describes one answered query, for Config.QueryLog.
type QueryEvent struct {
	Time      time.Time // when the query arrived
	Client    net.Addr  // the client's address; nil if the writer has none
	Network   string    // "udp" or "tcp"
	Name      string    // the question's name as sent; "" if no question
	Type      uint16    // the question's type; 0 if no question
	Rcode     int       // the reply's RCODE
	Answers   int       // RRs in the Answer section as sent
	Truncated bool      // whether TC was set
}

// settings is a Config with defaults applied and values parsed.
type settings struct {
	zone       string // lower-case FQDN
	ttl        uint32 // seconds
	addr       netip.AddrPort
	dnsService types.NamespacedName
	pods       PodMode
	zones      []zoneSpec // the cluster zone, then the reverse zones if served
	fixedOrder bool
	cache      *cacheSettings // nil: no cache plugin
	rand       *rand.Rand
	queryLog   func(QueryEvent)
	log        *slog.Logger
}

func (c Config) settings() (settings, error) {
	zone, err := parseZone(c.Zone)
	if err != nil {
		return settings{}, err
	}
	ttl, err := ttlSeconds(c.TTL)
	if err != nil {
		return settings{}, err
	}
	addr, err := parseAddr(c.Addr)
	if err != nil {
		return settings{}, err
	}
	pods, err := parsePods(c.Pods)
	if err != nil {
		return settings{}, err
	}
	cache, err := c.Cache.settings()
	if err != nil {
		return settings{}, err
	}
	st := settings{
		zone:       zone,
		ttl:        ttl,
		addr:       addr,
		dnsService: c.DNSService,
		pods:       pods,
		zones:      zoneSpecs(zone, !c.NoReverseZones),
		fixedOrder: c.FixedOrder,
		cache:      cache,
		rand:       c.Rand,
		queryLog:   c.QueryLog,
		log:        c.Logger,
	}
	if st.dnsService == (types.NamespacedName{}) {
		st.dnsService = DefaultDNSService
	}
	if st.log == nil {
		st.log = slog.Default()
	}
	st.log = st.log.With("component", "clusterdns")
	return st, nil
}

func parseZone(z string) (string, error) {
	if z == "" {
		z = DefaultZone
	}
	z = dns.Fqdn(strings.ToLower(z))
	if _, ok := dns.IsDomainName(z); !ok {
		return "", fmt.Errorf("clusterdns: zone %q is not a domain name", z)
	}
	return z, nil
}

func parsePods(m PodMode) (PodMode, error) {
	switch m {
	case "":
		return PodsDisabled, nil
	case PodsDisabled, PodsInsecure, PodsVerified:
		return m, nil
	}
	return "", fmt.Errorf("clusterdns: pods mode %q is not disabled, insecure or verified", string(m))
}

func ttlSeconds(d time.Duration) (uint32, error) {
	switch {
	case d == 0:
		d = DefaultTTL
	case d < 0:
		d = 0
	case d > MaxTTL:
		return 0, fmt.Errorf("clusterdns: TTL %v is above the maximum %v", d, MaxTTL)
	}
	return uint32(d / time.Second), nil
}

func parseAddr(a string) (netip.AddrPort, error) {
	if a == "" {
		a = DefaultAddr
	}
	if err := loopback.CheckAddr(a); err != nil {
		return netip.AddrPort{}, fmt.Errorf("clusterdns: listen address: %w", err)
	}
	return netip.MustParseAddrPort(a), nil
}

// labels returns the labels of the FQDN name in order, as written
// (escapes kept); the root has none.
func labels(name string) []string {
	idx := dns.Split(name)
	out := make([]string, len(idx))
	for i, start := range idx {
		end := len(name) - 1
		if i+1 < len(idx) {
			end = idx[i+1] - 1
		}
		out[i] = name[start:end]
	}
	return out
}
