package scenario

import (
	"fmt"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DNSCache is CoreDNS's cache plugin in front of the cluster DNS, as in
// the Corefile
//
//	cache [TTL] { success CAPACITY [TTL [MINTTL]]; denial CAPACITY [TTL [MINTTL]]; keepttl }
//
// Answers are then kept, and served with their TTL counting down, until
// that TTL runs out, whatever changes meanwhile: after a rollout clients
// get the old pod IPs for up to the TTL, and a name that did not exist
// stays NXDOMAIN for the denial TTL. Zones the plugin disables are
// answered afresh every time, with capped TTLs.
type DNSCache struct {
	// Preset is where the other fields start from: "kubeadm" (kubeadm
	// v1.32 and later, "cache 30 { disable success cluster.local; disable
	// denial cluster.local }": answers in the cluster zone are not kept,
	// only capped at 30s), "kubeadm-1.31" (kubeadm v1.31 and before, a
	// bare "cache 30": every zone kept up to 30s) or "coredns" (the
	// plugin's defaults, "cache": 3600s for answers, 1800s for denials, 5s
	// minimum, 10000 each). Default coredns.
	Preset string `json:"preset,omitempty"`
	// TTL caps how long both caches keep an answer ("cache TTL").
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// Success and Denial set the two caches, as the plugin's lines.
	Success *DNSCacheClass `json:"success,omitempty"`
	Denial  *DNSCacheClass `json:"denial,omitempty"`
	// KeepTTL serves the stored TTL instead of counting it down.
	KeepTTL bool `json:"keepTTL,omitempty"`
}

// DNSCacheClass is the plugin's "success" or "denial" line.
type DNSCacheClass struct {
	// Capacity is how many answers the cache keeps; default 10000.
	Capacity *int `json:"capacity,omitempty"`
	// TTL caps how long an answer is kept.
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// MinTTL is the least time an answer is kept; default 5s.
	MinTTL *metav1.Duration `json:"minTTL,omitempty"`
}

// DNSCachePresets are the values of DNSCache.Preset.
var DNSCachePresets = []string{"coredns", "kubeadm", "kubeadm-1.31"}

// kubeadmCacheTTL is the cap of kubeadm's "cache 30".
const kubeadmCacheTTL = 30 * time.Second

// dnsCache resolves spec.dns.cache; nil stays nil (no cache plugin).
func dnsCache(c *DNSCache, s site) (*plan.DNSCache, error) {
	if c == nil {
		return nil, nil
	}
	out := &plan.DNSCache{KeepTTL: c.KeepTTL}
	switch c.Preset {
	case "", "coredns":
	case "kubeadm": // cmd/kubeadm/app/phases/addons/dns/manifests.go, v1.32.0 on
		out.Success = plan.DNSCacheClass{MaxTTL: kubeadmCacheTTL, Disable: []string{Zone}}
		out.Denial = plan.DNSCacheClass{MaxTTL: kubeadmCacheTTL, Disable: []string{Zone}}
	case "kubeadm-1.31": // the same file up to v1.31.0
		out.Success.MaxTTL, out.Denial.MaxTTL = kubeadmCacheTTL, kubeadmCacheTTL
	default:
		return nil, s.Errorf("preset", "%q: expected %s", c.Preset, strings.Join(DNSCachePresets, ", "))
	}
	if c.TTL != nil {
		if err := checkCacheTTL(c.TTL.Duration, 1); err != nil {
			return nil, s.Errorf("ttl", "%v: %v", c.TTL.Duration, err)
		}
		out.Success.MaxTTL, out.Denial.MaxTTL = c.TTL.Duration, c.TTL.Duration
	}
	var err error
	if out.Success, err = cacheClass(out.Success, c.Success, s, "success"); err != nil {
		return nil, err
	}
	out.Denial, err = cacheClass(out.Denial, c.Denial, s, "denial")
	return out, err
}

// cacheClass applies one of the plugin's lines to cl.
func cacheClass(cl plan.DNSCacheClass, c *DNSCacheClass, s site, name string) (plan.DNSCacheClass, error) {
	if c == nil {
		return cl, nil
	}
	if c.Capacity != nil {
		if *c.Capacity < 1 || *c.Capacity > maxCacheCapacity {
			return cl, s.Errorf(name+".capacity", "%d: expected 1 to %d answers", *c.Capacity, maxCacheCapacity)
		}
		cl.Capacity = *c.Capacity
	}
	if c.TTL != nil {
		if err := checkCacheTTL(c.TTL.Duration, 1); err != nil {
			return cl, s.Errorf(name+".ttl", "%v: %v", c.TTL.Duration, err)
		}
		cl.MaxTTL = c.TTL.Duration
	}
	if c.MinTTL != nil {
		if err := checkCacheTTL(c.MinTTL.Duration, 0); err != nil {
			return cl, s.Errorf(name+".minTTL", "%v: %v", c.MinTTL.Duration, err)
		}
		cl.MinTTL = c.MinTTL.Duration
		if cl.MinTTL == 0 {
			cl.MinTTL = -1 // none (plan's zero is the plugin's 5s)
		}
	}
	return cl, nil
}

// maxCacheCapacity bounds a cache's capacity in a lab.
const maxCacheCapacity = 1 << 20

// checkCacheTTL accepts whole seconds from least (1 for a cap: CoreDNS
// refuses 0, and 0 for a minimum) to a day.
func checkCacheTTL(d time.Duration, least int) error {
	if d%time.Second != 0 || d < time.Duration(least)*time.Second || d > 24*time.Hour {
		return fmt.Errorf("expected whole seconds from %ds to 86400s", least)
	}
	return nil
}
