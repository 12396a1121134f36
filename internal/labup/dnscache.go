package labup

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// ParseDNSCache reads `lab up`'s --dns-cache flags as CoreDNS's cache
// plugin in front of the cluster DNS: preset is "off" (nil: no cache),
// "kubeadm" (kubeadm v1.32 and later: cache 30, the cluster zone not
// kept), "kubeadm-1.31" (cache 30), "coredns" (the plugin's defaults) or a
// TTL cap such as "30s" (cache 30); success and denial are the plugin's
// lines, CAPACITY[,TTL[,MINTTL]] ("" keeps the preset's); keepTTL serves
// the stored TTL. The errors name the flag and what it expects.
func ParseDNSCache(preset, success, denial string, keepTTL bool) (*clusterdns.CacheConfig, error) {
	var c *clusterdns.CacheConfig
	switch preset {
	case "off":
	case "kubeadm":
		c = clusterdns.KubeadmCache(clusterdns.DefaultZone)
	case "kubeadm-1.31":
		c = clusterdns.KubeadmCacheV131()
	case "coredns":
		c = &clusterdns.CacheConfig{}
	default:
		d, err := time.ParseDuration(preset)
		if err != nil || checkCacheTTL(d, 1) != nil {
			return nil, fmt.Errorf("--dns-cache %q: expected off, kubeadm, kubeadm-1.31, coredns or a TTL cap in whole seconds from 1s to 86400s, such as 30s", preset)
		}
		c = &clusterdns.CacheConfig{Success: clusterdns.CacheClass{MaxTTL: d}, Denial: clusterdns.CacheClass{MaxTTL: d}}
	}
	if c == nil {
		if success != "" || denial != "" || keepTTL {
			return nil, fmt.Errorf("--dns-cache-success, --dns-cache-denial and --dns-cache-keepttl tune the cache plugin: add --dns-cache kubeadm, kubeadm-1.31, coredns or a TTL")
		}
		return nil, nil
	}
	var err error
	if c.Success, err = parseCacheClass("--dns-cache-success", success, c.Success); err != nil {
		return nil, err
	}
	if c.Denial, err = parseCacheClass("--dns-cache-denial", denial, c.Denial); err != nil {
		return nil, err
	}
	c.KeepTTL = keepTTL
	return c, nil
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

// CheckTTL accepts what CoreDNS's "ttl" option accepts: whole seconds from
// 0 to 3600.
func CheckTTL(d time.Duration) error {
	switch {
	case d < 0:
		return errors.New("must not be negative; expected whole seconds from 0s to 3600s")
	case d%time.Second != 0:
		return errors.New("DNS TTLs are whole seconds; expected e.g. 0s, 5s or 30s")
	case d > clusterdns.MaxTTL:
		return fmt.Errorf("above the maximum %v (CoreDNS's limit)", clusterdns.MaxTTL)
	}
	return nil
}
