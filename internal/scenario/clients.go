package scenario

import (
	"errors"
	"fmt"
	"time"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/stats"
)

// clients are a variant's running load clients and the plans they run,
// which configureClient steps change.
type clients struct {
	dnsAddr string
	plans   []ClientPlan // index-aligned with byIndex
	byIndex []*load.Client
	configs []load.Config
}

// newClients creates the plan's load clients, each with its own IP from the
// pod network, as client pods would have.
func newClients(l *lab.Lab, rec *stats.Recorder, plans []ClientPlan) (_ *clients, err error) {
	cl := &clients{dnsAddr: l.DNSAddr(), plans: append([]ClientPlan(nil), plans...)}
	defer func() {
		if err != nil {
			for _, c := range cl.byIndex {
				c.Close()
			}
		}
	}()
	for _, cp := range cl.plans {
		ip, err := l.Cluster.PodIPs().Allocate()
		if err != nil {
			return nil, fmt.Errorf("client %s: no pod IP: %w", cp.Name, err)
		}
		rec.Client(cp.Name, ip)
		cfg := loadConfig(cp, cl.dnsAddr)
		cfg.Source = ip
		cfg.Observer = clientObserver{rec: rec, name: cp.Name}
		c, err := load.New(cfg)
		if err != nil {
			return nil, err
		}
		cl.byIndex = append(cl.byIndex, c)
		cl.configs = append(cl.configs, cfg)
	}
	return cl, nil
}

// loadConfig turns a client plan into a load client's settings (without
// Source and Observer).
func loadConfig(cp ClientPlan, dnsAddr string) load.Config {
	s := cp.Settings
	cfg := load.Config{
		Name: cp.Name, Target: cp.Target.GRPCTarget(dnsAddr), Policy: cp.Policy, Rate: cp.Rate, Timeout: cp.Timeout,
		Resolver:     s.Resolver,
		HealthCheck:  s.HealthCheck != nil && *s.HealthCheck,
		WaitForReady: s.WaitForReady != nil && *s.WaitForReady,
		Stream:       s.Call == "stream",
	}
	if s.CacheTTL != nil {
		cfg.CacheTTL = s.CacheTTL.Duration
		if s.CacheTTL.Duration == Forever {
			cfg.CacheTTL = load.Forever
		}
	} else if s.Resolver == "cached" {
		cfg.CacheTTL = 30 * time.Second
	}
	if s.MinResolutionInterval != nil {
		cfg.MinResolutionInterval = s.MinResolutionInterval.Duration
	}
	if s.StreamLength != nil {
		cfg.StreamLength = s.StreamLength.Duration
	}
	if r := s.Retry; r != nil {
		cfg.Retry = &load.RetryPolicy{
			MaxAttempts: r.MaxAttempts, InitialBackoff: r.InitialBackoff.Duration, MaxBackoff: r.MaxBackoff.Duration,
			BackoffMultiplier: r.BackoffMultiplier,
		}
		for _, c := range r.RetryableStatusCodes {
			cfg.Retry.RetryableStatusCodes = append(cfg.Retry.RetryableStatusCodes, statusCodes[c]) // checked by Load
		}
	}
	return cfg
}

func (cl *clients) all() []*load.Client { return cl.byIndex }

// matching returns the indexes of the clients name selects: one client
// ("order-0") or a group ("order").
func (cl *clients) matching(name string) []int {
	var out []int
	for i, cp := range cl.plans {
		if cp.Name == name || cp.Group == name {
			out = append(out, i)
		}
	}
	return out
}

// restart replaces the channels of the clients name selects.
func (cl *clients) restart(name string, rec *stats.Recorder) error {
	idx := cl.matching(name)
	if len(idx) == 0 {
		return fmt.Errorf("%w %q", errNoClient, name)
	}
	var errs []error
	for _, i := range idx {
		err := cl.byIndex[i].Restart()
		if err == nil {
			rec.ClientRestart(cl.plans[i].Name, time.Now())
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// configure applies a configureClient step to the clients it selects.
func (cl *clients) configure(st ConfigureClientStep, rec *stats.Recorder) error {
	idx := cl.matching(st.Client)
	if len(idx) == 0 {
		return fmt.Errorf("%w %q", errNoClient, st.Client)
	}
	var errs []error
	for _, i := range idx {
		cp := cl.plans[i]
		if st.Policy != "" {
			cp.Policy = st.Policy
		}
		if st.Rate > 0 {
			cp.Rate = st.Rate
		}
		cp.Settings = cp.Settings.overlay(st.ClientSettings)
		cfg := loadConfig(cp, cl.dnsAddr)
		cfg.Source, cfg.Observer = cl.configs[i].Source, cl.configs[i].Observer
		if err := cl.byIndex[i].Reconfigure(cfg); err != nil {
			errs = append(errs, err)
			continue
		}
		cl.plans[i], cl.configs[i] = cp, cfg
		rec.ClientRestart(cp.Name, time.Now())
	}
	return errors.Join(errs...)
}
