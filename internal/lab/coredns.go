package lab

import (
	"fmt"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/coredns"
)

// coreDNSConfig maps the lab's DNS settings (Config.DNS, meant for
// pinlab's server) onto the real CoreDNS's Corefile, starting from
// API.CoreDNS. What maps:
//
//   - TTL: the kubernetes plugin's ttl (zero is clusterdns's default, 5s,
//     the plugin's own; negative is ttl 0). Above an hour is an error in
//     both.
//   - Pods: the pods option ("" is clusterdns's default, disabled).
//   - FixedOrder: no loadbalance plugin (CoreDNS's order is then the
//     kubernetes plugin's, not clusterdns's; see coredns.Config).
//   - Cache: the cache block; nil is no cache plugin, as for pinlab's DNS.
//   - Zone, QueryLog: as they are.
//
// Rand and Logger have no Corefile form: CoreDNS's loadbalance shuffles
// with its own random source, so Config.Seed does not make its order
// repeatable; its log is its own file. Addr is the lab's. NoReverseZones
// and a DNSService other than kube-dns are errors naming the setting: the
// Corefile keeps kubeadm's reverse zones, and CoreDNS finds its own
// Service from its endpoints, not from a setting.
func coreDNSConfig(cfg Config) (coredns.Config, error) {
	dc, cc := cfg.DNS, cfg.API.CoreDNS
	if dc.NoReverseZones {
		return cc, fmt.Errorf("lab: the cluster DNS is CoreDNS with kubeadm's reverse zones; DNS.NoReverseZones cannot be set")
	}
	if dc.DNSService != clusterdns.DefaultDNSService && dc.DNSService.Name != "" {
		return cc, fmt.Errorf("lab: the cluster DNS is CoreDNS, behind %v; DNS.DNSService %v cannot be set", clusterdns.DefaultDNSService, dc.DNSService)
	}
	switch {
	case dc.TTL == 0:
		cc.TTL = clusterdns.DefaultTTL
	case dc.TTL < 0:
		cc.TTL = -1
	case dc.TTL > clusterdns.MaxTTL:
		return cc, fmt.Errorf("lab: DNS.TTL %v is above CoreDNS's maximum ttl %v", dc.TTL, clusterdns.MaxTTL)
	case dc.TTL < time.Second:
		return cc, fmt.Errorf("lab: DNS.TTL %v: CoreDNS's ttl is whole seconds; use a negative TTL for 0", dc.TTL)
	default:
		cc.TTL = dc.TTL
	}
	cc.Pods = dc.Pods
	if cc.Pods == "" {
		cc.Pods = clusterdns.PodsDisabled
	}
	cc.Zone, cc.FixedOrder, cc.QueryLog = dc.Zone, dc.FixedOrder, dc.QueryLog
	cc.Cache, cc.NoCache = dc.Cache, dc.Cache == nil
	if err := coredns.CheckCache(dc.Cache); err != nil {
		return cc, fmt.Errorf("lab: DNS.Cache: %w", err)
	}
	return cc, nil
}
