package load

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"google.golang.org/grpc/codes"
)

// TestReconfigureSwitchesPolicy: a pick_first client pinned to one of three
// backends switches to round_robin while running, without a failed call,
// and then reaches all three.
func TestReconfigureSwitchesPolicy(t *testing.T) {
	a := startBackend(t, "a", "127.203.60.1:0")
	port := a.addr.Port()
	startBackend(t, "b", fmt.Sprintf("127.203.60.2:%d", port))
	startBackend(t, "c", fmt.Sprintf("127.203.60.3:%d", port))
	d := dnstest.Start(t)
	d.Set("pricing.test", netip.MustParseAddr("127.203.60.1"), netip.MustParseAddr("127.203.60.2"), netip.MustParseAddr("127.203.60.3"))
	var obs collector
	cfg := Config{
		Name: "c", Source: netip.MustParseAddr("127.203.60.9"), Target: fmt.Sprintf("dns://%s/pricing.test:%d", d.Addr(), port),
		Resolver: ResolverCached, Policy: "pick_first", Rate: 200, Observer: &obs,
	}
	c, stop := start(t, cfg)
	labtest.WaitFor(t, 10*time.Second, "50 calls", func() bool { return len(obs.snapshot()) >= 50 })
	if pods := count(obs.snapshot()).pods; len(pods) != 1 {
		t.Fatalf("pick_first answers by %v; want one pod", pods)
	}
	switched := time.Now()
	cfg.Policy = "round_robin"
	if err := c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	everyPod := func() bool {
		pods := count(dueAfter(obs.snapshot(), switched)).pods
		return pods["a"] > 5 && pods["b"] > 5 && pods["c"] > 5
	}
	labtest.WaitFor(t, 10*time.Second, "round_robin to reach every pod", everyPod)
	stop()
	if got := count(obs.snapshot()); got.codes[codes.OK] != got.total {
		t.Errorf("codes %v across the switch; want all OK", got.codes)
	}
	if err := c.Reconfigure(cfg); err == nil {
		t.Error("Reconfigure after Run returned succeeded, want an error")
	}
}

// TestReconfigureRate: the open-loop schedule continues at the new rate
// from the last call sent. Due times come from the schedule alone, so their
// gaps are exact: 100 ms at 10/s, then 5 ms at 200/s.
func TestReconfigureRate(t *testing.T) {
	b := startBackend(t, "b", "127.203.61.1:0")
	var obs collector
	cfg := Config{Source: netip.MustParseAddr("127.203.61.9"), Target: "passthrough:///" + b.addr.String(), Rate: 10, Observer: &obs}
	c, stop := start(t, cfg)
	labtest.WaitFor(t, 10*time.Second, "5 calls", func() bool { return len(obs.snapshot()) >= 5 })
	switched := time.Now()
	cfg.Rate = 200
	if err := c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "80 calls at the new rate", func() bool { return len(dueAfter(obs.snapshot(), switched)) >= 80 })
	stop()
	rs := obs.snapshot()
	slices.SortFunc(rs, func(x, y Result) int { return x.Due.Compare(y.Due) })
	var gaps []time.Duration // distinct gaps in order
	for i := 1; i < len(rs); i++ {
		g := rs[i].Due.Sub(rs[i-1].Due)
		if len(gaps) == 0 || gaps[len(gaps)-1] != g {
			gaps = append(gaps, g)
		}
	}
	if diff := cmp.Diff([]time.Duration{100 * time.Millisecond, 5 * time.Millisecond}, gaps); diff != "" {
		t.Errorf("gaps between due times, in order (-want +got):\n%s", diff)
	}
	if got := count(rs); got.codes[codes.OK] != got.total {
		t.Errorf("codes %v; want all OK", got.codes)
	}
}

// TestReconfigureRejectsBadConfig: a bad config leaves the client running
// with its old settings.
func TestReconfigureRejectsBadConfig(t *testing.T) {
	b := startBackend(t, "b", "127.203.62.1:0")
	var obs collector
	cfg := Config{Source: netip.MustParseAddr("127.203.62.9"), Target: "passthrough:///" + b.addr.String(), Rate: 100, Observer: &obs}
	c, stop := start(t, cfg)
	bad := cfg
	bad.Policy = "random"
	if err := c.Reconfigure(bad); err == nil {
		t.Fatal("Reconfigure with an unknown policy succeeded, want an error")
	}
	after := time.Now()
	labtest.WaitFor(t, 10*time.Second, "calls after the rejected change", func() bool { return len(dueAfter(obs.snapshot(), after)) >= 20 })
	stop()
	if got := count(obs.snapshot()); got.codes[codes.OK] != got.total || got.total == 0 {
		t.Errorf("codes %v; want all OK", got.codes)
	}
}
