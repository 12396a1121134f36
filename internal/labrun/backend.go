package labrun

import (
	"context"
	"errors"
	"slices"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/proxy"
	"github.com/pinlab/pinlab/internal/runner"
)

// The runner's backends for a lab (runner.Backend): each variant in its
// own lab.Lab, which is a runner.Cluster as it is.
var (
	_ runner.Backend = embedded{}
	_ runner.Backend = controlPlanes{}
	_ runner.Cluster = (*lab.Lab)(nil)
	_ runner.Cluster = kubeCluster{}
)

// embedded runs each variant in a lab on the embedded API and controllers,
// on its own loopback address range (lab.Config.Range).
type embedded struct{}

// Embedded is the backend of `lab run` on the embedded control plane.
func Embedded() runner.Backend { return embedded{} }

// MaxClusters is the number of address ranges: Start waits for a free
// one beyond it (another process's labs hold some).
func (embedded) MaxClusters() int { return lab.Ranges }

func (embedded) Start(ctx context.Context, s runner.Setup) (runner.Cluster, error) {
	cfg := labConfig(s)
	cfg.Waiting = func() {
		if s.State != nil {
			s.State("waiting for a free address range")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, runner.SetupTimeout)
	defer cancel()
	return lab.Start(ctx, cfg)
}

// controlPlanes runs each variant in a lab on a real control plane of its
// own (package kubelab), inside the lab's network namespace.
type controlPlanes struct{ v *kubelab.Variants }

// MaxClusters is kubelab.MaxVariants: the real control planes one
// machine runs at once.
func (controlPlanes) MaxClusters() int { return kubelab.MaxVariants }

func (b controlPlanes) Start(ctx context.Context, s runner.Setup) (runner.Cluster, error) {
	if s.State != nil {
		s.State("starting its control plane")
	}
	api, stop, err := b.v.Start(ctx, s.Index)
	if err != nil {
		return nil, err
	}
	cfg := labConfig(s)
	cfg.API = api
	sctx, cancel := context.WithTimeout(ctx, runner.SetupTimeout)
	defer cancel()
	l, err := lab.Start(sctx, cfg)
	if err != nil {
		stop(ctx.Err() == nil)
		return nil, err
	}
	return kubeCluster{l, stop}, nil
}

// kubeCluster is a lab on a real control plane: closing it stops the
// control plane too, once the lab has closed, keeping the components'
// logs when the lab failed (its error names one).
type kubeCluster struct {
	*lab.Lab
	stop func(failed bool) error
}

func (c kubeCluster) Close() error {
	err := c.Lab.Close()
	return errors.Join(err, c.stop(c.Lab.Err() != nil))
}

// DataplaneName says what serves the lab's ClusterIPs (the runner records
// it on a real control plane only).
func (c kubeCluster) DataplaneName() string { return string(c.Dataplane()) }

// labConfig is the lab a variant runs in, as its Setup says: the plan's
// DNS and cluster settings, and the runner's hooks on the lab's
// components.
func labConfig(s runner.Setup) lab.Config {
	dns := s.DNS
	cfg := lab.Config{
		Seed: s.Seed, Logger: s.Logger,
		DNS: clusterdns.Config{TTL: dns.TTL, FixedOrder: dns.FixedOrder, Pods: clusterdns.PodMode(dns.Pods),
			Cache: cacheConfig(dns.Cache), QueryLog: s.Hooks.DNSQuery},
		Proxy: proxy.Config{Mode: proxy.Mode(s.Variant.Cluster.ProxyMode), OnConn: s.Hooks.Conn},
		Kubelet: kubelet.Config{Observe: s.Hooks.Pod, Events: s.Hooks.PodEvent,
			DeadAddress: s.Variant.Cluster.DeadAddress, RestartBackoff: s.Variant.Cluster.RestartBackoff},
	}
	if dns.TTL == 0 {
		cfg.DNS.TTL = -1 // no caching
	}
	return cfg
}

// cacheConfig is the cluster DNS's cache plugin for the plan's; nil for
// none.
func cacheConfig(c *plan.DNSCache) *clusterdns.CacheConfig {
	if c == nil {
		return nil
	}
	class := func(cl plan.DNSCacheClass) clusterdns.CacheClass {
		return clusterdns.CacheClass{Capacity: cl.Capacity, MaxTTL: cl.MaxTTL, MinTTL: cl.MinTTL, Disable: slices.Clone(cl.Disable)}
	}
	return &clusterdns.CacheConfig{Success: class(c.Success), Denial: class(c.Denial), KeepTTL: c.KeepTTL}
}
