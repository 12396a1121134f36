package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// addDNSCacheFlags adds lab up's flags for CoreDNS's cache plugin, which
// follow its Corefile syntax:
//
//	cache [TTL] { success CAPACITY [TTL [MINTTL]]; denial CAPACITY [TTL [MINTTL]]; keepttl }
func addDNSCacheFlags(f *pflag.FlagSet, opts *LabUpOptions) {
	f.StringVar(&opts.DNSCache, "dns-cache", "off", "CoreDNS's cache plugin in front of the DNS: off, kubeadm (kubeadm v1.32 and later: cache 30 { disable success cluster.local; disable denial cluster.local }, answers in the cluster zone not kept), kubeadm-1.31 (kubeadm v1.31 and before: cache 30, every zone kept), coredns (cache: the plugin's defaults) or a TTL cap such as 30s (cache 30)")
	f.StringVar(&opts.DNSCacheSuccess, "dns-cache-success", "", "the cache's success line, CAPACITY[,TTL[,MINTTL]] such as 9984,30s,5s (needs --dns-cache)")
	f.StringVar(&opts.DNSCacheDenial, "dns-cache-denial", "", "the cache's denial line, CAPACITY[,TTL[,MINTTL]] (needs --dns-cache)")
	f.BoolVar(&opts.DNSCacheKeepTTL, "dns-cache-keepttl", false, "serve cached answers with the TTL they were stored with instead of counting it down (needs --dns-cache)")
}

// parseDNSCache sets opts.dnsCache from the --dns-cache flags.
func (o *LabUpOptions) parseDNSCache() error {
	var c *clusterdns.CacheConfig
	switch o.DNSCache {
	case "off":
	case "kubeadm":
		c = clusterdns.KubeadmCache(clusterdns.DefaultZone)
	case "kubeadm-1.31":
		c = clusterdns.KubeadmCacheV131()
	case "coredns":
		c = &clusterdns.CacheConfig{}
	default:
		d, err := time.ParseDuration(o.DNSCache)
		if err != nil || checkCacheTTL(d, 1) != nil {
			return fmt.Errorf("--dns-cache %q: expected off, kubeadm, kubeadm-1.31, coredns or a TTL cap in whole seconds from 1s to 86400s, such as 30s", o.DNSCache)
		}
		c = &clusterdns.CacheConfig{Success: clusterdns.CacheClass{MaxTTL: d}, Denial: clusterdns.CacheClass{MaxTTL: d}}
	}
	if c == nil {
		if o.DNSCacheSuccess != "" || o.DNSCacheDenial != "" || o.DNSCacheKeepTTL {
			return fmt.Errorf("--dns-cache-success, --dns-cache-denial and --dns-cache-keepttl tune the cache plugin: add --dns-cache kubeadm, kubeadm-1.31, coredns or a TTL")
		}
		return nil
	}
	var err error
	if c.Success, err = parseCacheClass("--dns-cache-success", o.DNSCacheSuccess, c.Success); err != nil {
		return err
	}
	if c.Denial, err = parseCacheClass("--dns-cache-denial", o.DNSCacheDenial, c.Denial); err != nil {
		return err
	}
	c.KeepTTL = o.DNSCacheKeepTTL
	o.dnsCache = c
	return nil
}

// parseCacheClass reads CAPACITY[,TTL[,MINTTL]] over cl; "" keeps cl.
func parseCacheClass(flag, v string, cl clusterdns.CacheClass) (clusterdns.CacheClass, error) {
	if v == "" {
		return cl, nil
	}
	bad := func(why string) (clusterdns.CacheClass, error) {
		return cl, fmt.Errorf("%s %q: %s; expected CAPACITY[,TTL[,MINTTL]] such as 9984,30s,5s", flag, v, why)
	}
	parts := strings.Split(v, ",")
	if len(parts) > 3 {
		return bad("too many values")
	}
	n, err := strconv.Atoi(parts[0])
	if err != nil || n < 1 {
		return bad("the capacity is a number of answers, at least 1")
	}
	cl.Capacity = n
	for i, least := range []int{1, 0}[:len(parts)-1] {
		d, err := time.ParseDuration(parts[i+1])
		if err == nil {
			err = checkCacheTTL(d, least)
		}
		if err != nil {
			return bad(fmt.Sprintf("%s: %v", parts[i+1], err))
		}
		if i == 0 {
			cl.MaxTTL = d
		} else {
			cl.MinTTL = d
			if d == 0 {
				cl.MinTTL = -1 // no minimum (zero is the plugin's 5s)
			}
		}
	}
	return cl, nil
}

// checkCacheTTL accepts whole seconds from least to a day: CoreDNS
// refuses a TTL cap of 0, and takes a minimum of 0.
func checkCacheTTL(d time.Duration, least int) error {
	if d%time.Second != 0 || d < time.Duration(least)*time.Second || d > 24*time.Hour {
		return fmt.Errorf("whole seconds from %ds to 86400s", least)
	}
	return nil
}
