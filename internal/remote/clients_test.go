package remote

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/loadpod"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
	"google.golang.org/grpc/codes"
	"k8s.io/client-go/informers"
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
	calls, sent, closed int
	conns               []time.Time
}

func (r *recorded) Started(netip.Addr)            {}
func (r *recorded) Called(load.Result)            { r.calls++ }
func (r *recorded) Sent(time.Time, time.Duration) { r.sent++ }
func (r *recorded) Conn(ev load.ConnEvent, at time.Time) {
	r.conns = append(r.conns, at)
	if !ev.Open {
		r.closed++
	}
}

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

// TestRestartClosesConnections: when a client's pod is replaced, the
// connections its old pod had open are reported closed (their own close
// events died with it).
func TestRestartClosesConnections(t *testing.T) {
	var mu sync.Mutex
	feed := loadfeed.NewFeed(0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		f := feed
		mu.Unlock()
		loadfeed.Handler(f, "s3cret-token-1234").ServeHTTP(w, req)
	}))
	defer srv.Close()
	remote := netip.MustParseAddrPort("10.0.0.1:8471")
	feed.Conn(load.ConnEvent{Remote: remote, Open: true})
	r := &recorded{}
	hc := &hostedClient{obs: r, reader: &loadfeed.Reader{URL: srv.URL, Token: "s3cret-token-1234", Client: srv.Client()}}
	poll := func() {
		evs, err := hc.reader.Poll(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		hc.closeRestarted(time.Now())
		hc.report(evs, time.Now())
	}
	poll()
	if len(r.conns) != 1 {
		t.Fatalf("%d connection events, want the open", len(r.conns))
	}
	mu.Lock()
	feed = loadfeed.NewFeed(0) // the pod was replaced
	mu.Unlock()
	poll()
	if len(r.conns) != 2 || r.closed != 1 {
		t.Errorf("after the restart: %d connection events, %d closes; want the old one closed", len(r.conns), r.closed)
	}
	poll()
	if r.closed != 1 {
		t.Errorf("closed %d times, want once", r.closed)
	}
}

// TestFeedLost: a client whose events cannot be read for feedLost fails
// the variant (Failed closes, Err names the client); one whose events
// are read does not, nor one whose every read ends in an error after a
// full page of new events (a backlog read in pages, the next one lost),
// but one whose pages stay an hour behind does, and so does one whose pod
// dropped events due since the load's start before they were read (not
// events due during set-up).
func TestFeedLost(t *testing.T) {
	l, p := feedLost, pollEvery
	t.Cleanup(func() { feedLost, pollEvery = l, p })
	feedLost, pollEvery = 300*time.Millisecond, 20*time.Millisecond
	// fullPage is a full page's events, due at: only the page's Next
	// tells the reader where it is, so the same events serve every page.
	fullPage := func(at time.Time) string {
		ev := fmt.Sprintf(`{"seq":1,"kind":"sent","at":%q}`, at.Format(time.RFC3339Nano))
		return "[" + strings.Repeat(ev+",", loadfeed.MaxPage-1) + ev + "]"
	}
	for _, tt := range []struct {
		name     string
		answers  string // "all", "none", "a page" (a full page, then an error), "an old page", "dropped", "dropped in set-up"
		wantFail string // a part of the error; "" none
	}{
		{"read", "all", ""},
		{"unread", "none", "could not be read"},
		{"a page a read", "a page", ""},
		{"an hour behind", "an old page", "could not be read"},
		{"dropped", "dropped", "dropped 5 events"},
		{"dropped before the start", "dropped in set-up", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			feed := loadfeed.NewFeed(0)
			var mu sync.Mutex
			pages := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				switch q := req.URL.Query(); {
				case tt.answers == "none":
					http.Error(w, "pod gone", http.StatusBadGateway)
				case (tt.answers == "a page" || tt.answers == "an old page") && q.Get("max") != "0":
					mu.Lock()
					pages++
					odd := pages%2 == 1
					mu.Unlock()
					if !odd {
						http.Error(w, "the port-forward's stream ended", http.StatusBadGateway)
						return
					}
					due := time.Now()
					if tt.answers == "an old page" {
						due = due.Add(-time.Hour)
					}
					after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
					fmt.Fprintf(w, `{"id":"feed-1","events":%s,"next":%d,"now":%q}`, fullPage(due), after+loadfeed.MaxPage, time.Now().Format(time.RFC3339Nano))
				case (tt.answers == "dropped" || tt.answers == "dropped in set-up") && q.Get("max") != "0":
					// 5 events dropped, then one due now (or an hour ago,
					// before the load's start).
					due := time.Now()
					if tt.answers == "dropped in set-up" {
						due = due.Add(-time.Hour)
					}
					after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
					fmt.Fprintf(w, `{"id":"feed-1","events":[{"seq":%d,"kind":"sent","at":%q}],"next":%d,"lost":5,"now":%q}`,
						after+6, due.Format(time.RFC3339Nano), after+6, time.Now().Format(time.RFC3339Nano))
				default:
					loadfeed.Handler(feed, "s3cret-token-1234").ServeHTTP(w, req)
				}
			}))
			defer srv.Close()
			cfg, cs := testConfig(t)
			c := &Cluster{cfg: cfg, namespace: "pinlab-ab12cd34-0", failed: make(chan struct{}),
				factory: informers.NewSharedInformerFactory(cs, 0)}
			c.factory.Core().V1().Pods().Lister() // refreshIP's lister, never started: no pod known
			hc := &hostedClient{plan: plan.Client{Name: "order-0"}, obs: &recorded{},
				reader: &loadfeed.Reader{URL: srv.URL, Token: "s3cret-token-1234", Client: srv.Client()}}
			h := &hostedClients{c: c, events: srv.Client(), clients: []*hostedClient{hc}}
			// A feed that should fail the variant has 10 s to (a read
			// of 20000 events takes a second or two under -race on a
			// busy machine); one that should not is read for 4 feedLost.
			wait := 4 * feedLost
			if tt.wantFail != "" {
				wait = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			done := make(chan struct{})
			go func() { defer close(done); h.Relay(ctx, time.Now()) }()
			select {
			case <-c.Failed():
			case <-ctx.Done():
			}
			cancel()
			<-done
			err := c.Err()
			if (err != nil) != (tt.wantFail != "") {
				t.Fatalf("Err() = %v after %v of a feed that answers %q; want an error saying %q", err, wait, tt.answers, tt.wantFail)
			}
			if err != nil && (!strings.Contains(err.Error(), "order-0") || !strings.Contains(err.Error(), tt.wantFail)) {
				t.Errorf("Err() = %v; want the client named and %q", err, tt.wantFail)
			}
		})
	}
}
