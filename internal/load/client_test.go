package load

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver/manual"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startPod starts a gRPC pod named "pod-<ip>" on ip with a free port and
// returns its address.
func startPod(t *testing.T, ip string) string {
	t.Helper()
	return podtest.Start(t, pod.Config{Name: "pod-" + ip, Addr: netip.MustParseAddrPort(ip + ":0")}).Addr().String()
}

func TestConfigErrors(t *testing.T) {
	good := Config{Name: "c", Source: netip.MustParseAddr("127.203.1.1"), Target: "passthrough:///127.0.0.1:1", Rate: 1}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{name: "zero rate", mod: func(c *Config) { c.Rate = 0 }},
		{name: "negative rate", mod: func(c *Config) { c.Rate = -1 }},
		{name: "unknown policy", mod: func(c *Config) { c.Policy = "random" }},
		{name: "source outside loopback", mod: func(c *Config) { c.Source = netip.MustParseAddr("10.0.0.1") }},
		{name: "no source", mod: func(c *Config) { c.Source = netip.Addr{} }},
		{name: "unknown resolver", mod: func(c *Config) { c.Resolver = "jvm" }},
		{name: "cached resolver needs a dns target", mod: func(c *Config) { c.Resolver = ResolverCached }},
		{name: "once resolver needs a dns target", mod: func(c *Config) { c.Resolver = ResolverOnce }},
		{name: "cached resolver without a DNS server", mod: func(c *Config) {
			c.Resolver, c.Target = ResolverCached, "dns:///pricing:8471"
		}},
		{name: "cached resolver with a DNS server off loopback", mod: func(c *Config) {
			c.Resolver, c.Target = ResolverCached, "dns://10.96.0.10:53/pricing:8471"
		}},
		{name: "dial in a cluster's pod", mod: func(c *Config) {
			c.InCluster, c.Source, c.Target, c.Dial = true, netip.Addr{}, "dns:///pricing:8471", (&dialLog{}).Dial
		}},
		{name: "xds resolver without grpc-go's xDS resolver", mod: func(c *Config) { c.Resolver, c.Target = ResolverXDS, "xds:///pricing.shop:8471" }},
		{name: "xds resolver on a dns target", mod: func(c *Config) {
			c.Resolver, c.Target, c.XDS = ResolverXDS, "dns://127.0.0.1:53/pricing:8471", manual.NewBuilderWithScheme("xds")
		}},
		{name: "policy settings of another policy", mod: func(c *Config) { c.Policy, c.PolicySettings = "least_request", `{"blackoutPeriod": "1s"}` }},
		{name: "negative cache TTL", mod: func(c *Config) { c.CacheTTL = -2 * time.Second }},
		{name: "negative timeout", mod: func(c *Config) { c.Timeout = -time.Second }},
		{name: "negative connect timeout", mod: func(c *Config) { c.ConnectTimeout = -time.Second }},
		{name: "one attempt", mod: func(c *Config) { c.Retry = &RetryPolicy{MaxAttempts: 1} }},
		{name: "negative backoff multiplier", mod: func(c *Config) { c.Retry = &RetryPolicy{BackoffMultiplier: -1} }},
		{name: "retry on OK", mod: func(c *Config) { c.Retry = &RetryPolicy{RetryableStatusCodes: []codes.Code{codes.OK}} }},
		{name: "retry on an unknown code", mod: func(c *Config) { c.Retry = &RetryPolicy{RetryableStatusCodes: []codes.Code{99}} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mod(&cfg)
			c, err := New(cfg)
			if err == nil {
				c.Close()
				t.Fatal("New succeeded, want an error")
			}
		})
	}
}

// TestOpenLoopSchedule: the client offers exactly the scheduled number of
// calls whatever the server does; every one is accounted for.
func TestOpenLoopSchedule(t *testing.T) {
	addr := startPod(t, "127.203.201.1")
	var obs collector
	c, err := New(Config{Name: "c", Source: netip.MustParseAddr("127.203.201.9"), Target: "passthrough:///" + addr, Rate: 500, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	labtest.RunFor(c.Run, 400*time.Millisecond)
	got := count(obs.snapshot())
	// 500/s for 0.4s schedules calls due at 0, 2ms, ... 400ms: 201 at most.
	if got.total > 201 || got.total < 100 || got.codes[codes.OK] != got.total {
		t.Errorf("codes %v (%d calls); want up to 201 calls, all OK", got.codes, got.total)
	}
	if got.pods["pod-127.203.201.1"] != got.total {
		t.Errorf("replies by pod %v; want all from pod-127.203.201.1", got.pods)
	}
}

func TestRestartOpensANewConnection(t *testing.T) {
	addr := startPod(t, "127.203.201.2")
	var obs collector
	c, stop := start(t, Config{Name: "c", Source: netip.MustParseAddr("127.203.201.10"), Target: "passthrough:///" + addr, Rate: 200, Observer: &obs})
	labtest.WaitFor(t, 5*time.Second, "first connection", func() bool { return obs.connections() >= 1 })
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 5*time.Second, "second connection", func() bool { return obs.connections() >= 2 })
	stop()
	got := count(obs.snapshot())
	if len(got.codes) != 1 || got.codes[codes.OK] == 0 {
		t.Errorf("codes %v across a restart; want only OK", got.codes)
	}
	if err := c.Restart(); err == nil {
		t.Error("Restart after Run returned succeeded, want an error")
	}
}

func TestUnreachableTargetCountsErrors(t *testing.T) {
	var obs collector
	// Nothing listens on port 1 of 127.203.201.3.
	c, err := New(Config{Name: "c", Source: netip.MustParseAddr("127.203.201.11"), Target: "passthrough:///127.203.201.3:1", Rate: 100, Timeout: 50 * time.Millisecond, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	labtest.RunFor(c.Run, 200*time.Millisecond)
	got := count(obs.snapshot())
	if got.codes[codes.OK] != 0 || got.codes[codes.Unavailable]+got.codes[codes.DeadlineExceeded] == 0 {
		t.Errorf("codes %v; want only UNAVAILABLE or DEADLINE_EXCEEDED", got.codes)
	}
}

// TestStreams: stream calls last StreamLength and succeed with every reply;
// a stream whose server stops hard fails with UNAVAILABLE; streams still
// open when the run ends are not reported.
func TestStreams(t *testing.T) {
	s := podtest.Start(t, pod.Config{Name: "streamer", Addr: netip.MustParseAddrPort("127.203.201.20:0")})
	var obs collector
	c, err := New(Config{Name: "c", Source: netip.MustParseAddr("127.203.201.21"), Target: "passthrough:///" + s.Addr().String(),
		Rate: 20, Stream: true, StreamLength: 300 * time.Millisecond, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	labtest.RunFor(c.Run, time.Second)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Run took %v after the end of load; open streams should be cut at once", took)
	}
	got := count(obs.snapshot())
	// 20 streams/s for 1s, each 300ms: those due before ~0.7s finish.
	if got.codes[codes.OK] < 5 || got.total != got.codes[codes.OK] {
		t.Errorf("codes %v; want at least 5 streams, all OK", got.codes)
	}
	for _, r := range obs.snapshot() {
		if r.Latency < 300*time.Millisecond {
			t.Errorf("a stream finished after %v, before its 300ms length", r.Latency)
			break
		}
	}

	// A hard stop cuts the streams in flight.
	var obs2 collector
	c2, err := New(Config{Name: "c2", Source: netip.MustParseAddr("127.203.201.22"), Target: "passthrough:///" + s.Addr().String(),
		Rate: 20, Stream: true, StreamLength: 5 * time.Second, Observer: &obs2})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	go func() {
		time.Sleep(500 * time.Millisecond)
		s.Kill()
	}()
	c2.Run(ctx2)
	got2 := count(obs2.snapshot())
	if got2.codes[codes.Unavailable] == 0 || got2.codes[codes.OK] != 0 {
		t.Errorf("codes %v after a hard stop; want UNAVAILABLE and no OK", got2.codes)
	}
}
