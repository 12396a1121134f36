package lab

import (
	"context"
	"math/rand/v2"
	"net/netip"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/proxy"
)

// pinlabDataplane is pinlab's own dataplane (DataplanePinlab): package
// proxy's kube-proxy emulation, a user-space relay listening on every
// ClusterIP port, and package clusterdns's DNS server, in this process.
// Both watch the lab's informers.
type pinlabDataplane struct {
	dns   *clusterdns.Server
	proxy *proxy.Proxier
}

// newPinlabDataplane builds pinlab's dataplane on c: the DNS at addr with
// cfg.DNS (its Rand from cfg.Seed), the Proxier with cfg.Proxy (its Seed
// cfg.Seed+1).
func newPinlabDataplane(cfg Config, c *cluster.Cluster, addr netip.AddrPort) (*pinlabDataplane, error) {
	dc := cfg.DNS
	dc.Addr, dc.Rand, dc.Logger = addr.String(), rand.New(rand.NewPCG(cfg.Seed, 2)), cfg.Logger
	dns, err := clusterdns.New(c.Factory(), dc)
	if err != nil {
		return nil, err
	}
	pc := cfg.Proxy
	pc.Seed, pc.Logger = cfg.Seed+1, cfg.Logger
	return &pinlabDataplane{dns: dns, proxy: proxy.New(c.Factory(), pc)}, nil
}

func (d *pinlabDataplane) start(ctx context.Context, l *Lab) error {
	if err := d.dns.Start(ctx); err != nil {
		return err
	}
	l.goRun(func() error { return d.proxy.Run(l.runCtx) })
	return nil
}

func (d *pinlabDataplane) dnsAddr() string { return d.dns.Addr() }

// served reads the Proxier's rules: a relay accepts on a ClusterIP port
// while it listens.
func (d *pinlabDataplane) served() (map[netip.AddrPort]servedVIP, error) {
	out := map[netip.AddrPort]servedVIP{}
	for _, r := range d.proxy.Rules() {
		out[r.VIP] = servedVIP{endpoints: len(r.Endpoints), accepting: r.Listening}
	}
	return out, nil
}

// syncQueryLog returns at once: pinlab's DNS logs each answer as it sends
// it.
func (d *pinlabDataplane) syncQueryLog(context.Context) error { return nil }

func (d *pinlabDataplane) stop(ctx context.Context) error { return d.dns.Shutdown(ctx) }

func (d *pinlabDataplane) logs() map[string]string { return nil }
