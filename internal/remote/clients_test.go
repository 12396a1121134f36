package remote

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/loadpod"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
	"google.golang.org/grpc/codes"
)

// TestLoadArgs: the args a client pod gets parse, in the image's load
// client, into the settings a lab's client has.
func TestLoadArgs(t *testing.T) {
	cfg, _ := testConfig(t)
	c := &Cluster{cfg: cfg}
	target := plan.Target{Namespace: "ns", Service: "pricing", Host: "pricing.ns.svc.cluster.local", Port: 8471}
	for _, tt := range []struct {
		name string
		s    plan.Settings
	}{
		{"defaults", plan.Settings{Resolver: load.ResolverGRPC}},
		{"every flag", plan.Settings{Resolver: load.ResolverGRPC, HealthCheck: true, WaitForReady: true, Stream: true, StreamLength: 7 * time.Second,
			MinResolutionInterval: 5 * time.Second, Retry: &plan.Retry{MaxAttempts: 3, InitialBackoff: 50 * time.Millisecond,
				MaxBackoff: time.Second, BackoffMultiplier: 1.5, RetryableStatusCodes: []codes.Code{codes.Unavailable, codes.Internal}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cp := plan.Client{Name: "order-0", Group: "order", Target: target, Policy: "round_robin", Rate: 12.5, Timeout: 2 * time.Second, Settings: tt.s}
			args, err := c.loadArgs(cp)
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"POD_NAME": "order-0", "PINLAB_TOKEN": cfg.Token}
			o, err := loadpod.Parse(args, func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("loadpod.Parse(%q): %v", args, err)
			}
			want := runner.ClientConfig(cp, "", nil)
			want.InCluster = true
			got := o.Client
			got.MinResolutionInterval = o.MinResolutionInterval // a process-wide flag there
			if !want.Stream {
				got.StreamLength = 0 // the flag's default, unused without --stream
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parsed %+v\nwant   %+v", got, want)
			}
			if o.Duration != cfg.LoadDuration || o.EventsPort != EventsPort {
				t.Errorf("duration %v, events port %d; want %v, %d", o.Duration, o.EventsPort, cfg.LoadDuration, EventsPort)
			}
		})
	}
	cp := plan.Client{Name: "order-0", Group: "order", Target: target, Rate: 1, Settings: plan.Settings{Resolver: load.ResolverKubernetes}}
	if _, err := c.loadArgs(cp); err == nil {
		t.Error("loadArgs took the kubernetes resolver")
	}
}

type recorded struct {
	calls, sent int
	conns       []time.Time
}

func (r *recorded) Started(netip.Addr)                  {}
func (r *recorded) Called(load.Result)                  { r.calls++ }
func (r *recorded) Sent(time.Time, time.Duration)       { r.sent++ }
func (r *recorded) Conn(_ load.ConnEvent, at time.Time) { r.conns = append(r.conns, at) }

// TestReport: calls and launches due before the start are dropped,
// connection events are all reported at their times.
func TestReport(t *testing.T) {
	start := time.Now()
	before, after := start.Add(-time.Second), start.Add(time.Second)
	r := &recorded{}
	hc := &hostedClient{obs: r}
	hc.report([]loadfeed.Event{
		{Kind: loadfeed.KindConn, At: before, Remote: "10.0.0.1:8471", Open: true},
		{Kind: loadfeed.KindSent, At: before},
		{Kind: loadfeed.KindCall, At: before},
		{Kind: loadfeed.KindSent, At: after},
		{Kind: loadfeed.KindCall, At: after, Pod: "pricing-1"},
		{Kind: loadfeed.KindConn, At: after, Remote: "10.0.0.1:8471"},
		{Kind: loadfeed.KindConn, At: after, Remote: "not an address"},
	}, start)
	if r.calls != 1 || r.sent != 1 || !reflect.DeepEqual(r.conns, []time.Time{before, after}) {
		t.Errorf("reported %d calls, %d launches, connections at %v; want 1, 1, [%v %v]", r.calls, r.sent, r.conns, before, after)
	}
}
