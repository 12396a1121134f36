package coredns

import (
	"fmt"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// The cache plugin's defaults (plugin/cache: defaultCap, maxTTL,
// maxNTTL, minTTL, minNTTL), written out so that a Corefile says every
// value.
const (
	cacheCapacity   = 10000
	cacheSuccessTTL = 3600 * time.Second
	cacheDenialTTL  = 1800 * time.Second
	cacheMinTTL     = 5 * time.Second
)

// kubeadmCacheTTL is the cap of kubeadm's "cache 30".
const kubeadmCacheTTL = 30

// cacheBlock returns the cache plugin's lines for c (see Config.Cache),
// indented as in the Corefile: kubeadm's block for nil, "" for none.
func cacheBlock(c *clusterdns.CacheConfig, none bool, zone string) (string, error) {
	if none {
		return "", nil
	}
	if c == nil {
		return fmt.Sprintf("    cache %d {\n       disable success %s\n       disable denial %s\n    }", kubeadmCacheTTL, zone, zone), nil
	}
	lines := []string{"    cache {"}
	for _, cl := range []struct {
		name   string
		class  clusterdns.CacheClass
		maxTTL time.Duration
	}{{"success", c.Success, cacheSuccessTTL}, {"denial", c.Denial, cacheDenialTTL}} {
		line, err := cacheClass(cl.name, cl.class, cl.maxTTL)
		if err != nil {
			return "", err
		}
		lines = append(lines, line)
		if len(cl.class.Disable) > 0 {
			lines = append(lines, "       disable "+cl.name+" "+strings.Join(cl.class.Disable, " "))
		}
	}
	if c.KeepTTL {
		lines = append(lines, "       keepttl")
	}
	return strings.Join(append(lines, "    }"), "\n"), nil
}

// cacheClass returns "success|denial CAPACITY TTL MINTTL" for cl, its
// zero fields the plugin's defaults (defTTL the class's cap).
func cacheClass(name string, cl clusterdns.CacheClass, defTTL time.Duration) (string, error) {
	capacity, ttl, minTTL := cl.Capacity, cl.MaxTTL, cl.MinTTL
	if capacity < 0 || ttl < 0 {
		return "", fmt.Errorf("coredns: cache %s: capacity %d, TTL %v: neither may be negative", name, capacity, ttl)
	}
	if capacity == 0 {
		capacity = cacheCapacity
	}
	if ttl == 0 {
		ttl = defTTL
	}
	if ttl < time.Second {
		return "", fmt.Errorf("coredns: cache %s: TTL %v: the cache plugin takes whole seconds, at least 1", name, ttl)
	}
	switch {
	case minTTL == 0:
		minTTL = cacheMinTTL
	case minTTL < 0:
		minTTL = 0
	}
	return fmt.Sprintf("       %s %d %d %d", name, capacity, int(ttl/time.Second), int(minTTL/time.Second)), nil
}

// CheckCache returns the error Start would give for c as Config.Cache
// (nil has none), so that a caller can refuse it before starting
// anything.
func CheckCache(c *clusterdns.CacheConfig) error {
	_, err := cacheBlock(c, false, DefaultZone)
	return err
}
