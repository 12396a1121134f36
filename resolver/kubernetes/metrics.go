package kubernetes

import (
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// timeNow is the metrics' clock; tests replace it.
var timeNow = time.Now

// Error reasons, the values of the errors_total metric's reason label.
const (
	reasonNoEndpoints     = "no_endpoints"      // slices, but no ready endpoint
	reasonNoSlices        = "no_slices"         // the Service exists, no slice
	reasonServiceNotFound = "service_not_found" // no such Service
	reasonNoPort          = "port_not_found"    // no slice has the target's port
	reasonForbidden       = "forbidden"         // 401 or 403 from the API server
	reasonAPI             = "api"               // any other list or watch failure
)

var (
	endpointsDesc = prometheus.NewDesc("grpc_kubernetes_resolver_endpoints",
		"Addresses the resolver last gave the channel, per target.", []string{"target"}, nil)
	updatesDesc = prometheus.NewDesc("grpc_kubernetes_resolver_updates_total",
		"Address lists pushed to channels, per target.", []string{"target"}, nil)
	errorsDesc = prometheus.NewDesc("grpc_kubernetes_resolver_errors_total",
		"Errors reported to channels, per target and reason.", []string{"target", "reason"}, nil)
	ageDesc = prometheus.NewDesc("grpc_kubernetes_resolver_seconds_since_update",
		"Seconds since the last address list pushed to a channel of the target (or since its first resolver started).",
		[]string{"target"}, nil)
)

// collector holds the metrics of every live resolver of the Builders that
// share a registerer. Resolvers of one target (several channels) share one
// series: counters add up, the gauges follow the latest update.
type collector struct {
	mu      sync.Mutex
	targets map[string]*targetStats
}

// registerCollector registers a collector with reg, or returns the one
// already registered there. A failure is logged, and the Builder then keeps
// no metrics.
func registerCollector(reg prometheus.Registerer, log *slog.Logger) *collector {
	c := &collector{targets: map[string]*targetStats{}}
	err := reg.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(*collector); ok {
			return existing
		}
	}
	if err != nil {
		log.Warn("kubernetes resolver: metrics not registered", "err", err)
		return nil
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{endpointsDesc, updatesDesc, errorsDesc, ageDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := timeNow()
	for name, s := range c.targets {
		ch <- prometheus.MustNewConstMetric(endpointsDesc, prometheus.GaugeValue, float64(s.endpoints), name)
		ch <- prometheus.MustNewConstMetric(updatesDesc, prometheus.CounterValue, float64(s.updates), name)
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, now.Sub(s.last).Seconds(), name)
		reasons := make([]string, 0, len(s.errors))
		for r := range s.errors {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(s.errors[r]), name, r)
		}
	}
}

// target returns the stats of one target, counting a new user; nil on a
// nil collector (no metrics), whose methods do nothing.
func (c *collector) target(name string) *targetStats {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.targets[name]
	if s == nil {
		s = &targetStats{c: c, name: name, errors: map[string]uint64{}, last: timeNow()}
		c.targets[name] = s
	}
	s.refs++
	return s
}

// targetStats are one target's metrics; the collector's lock guards them.
type targetStats struct {
	c         *collector
	name      string
	refs      int
	endpoints int
	updates   uint64
	errors    map[string]uint64
	last      time.Time
}

// updated records an address list of n addresses pushed to a channel.
func (s *targetStats) updated(n int) {
	if s == nil {
		return
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.endpoints, s.last = n, timeNow()
	s.updates++
}

// failed records an error reported to a channel.
func (s *targetStats) failed(reason string) {
	if s == nil {
		return
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.errors[reason]++
}

// release drops one user; the target's series go with the last.
func (s *targetStats) release() {
	if s == nil {
		return
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(s.c.targets, s.name)
	}
}
