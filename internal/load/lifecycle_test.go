package load

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"go.uber.org/goleak"
)

// TestConstructorsDoNoIO: New, NewHTTPClient and NewWSClient look nothing
// up, connect nowhere and leave no goroutine running; Close releases a
// client that never ran.
func TestConstructorsDoNoIO(t *testing.T) {
	d := dnstest.Start(t)
	d.Set("pricing.test", netip.MustParseAddr("127.203.71.1"))
	src := netip.MustParseAddr("127.203.71.9")
	target := fmt.Sprintf("dns://%s/pricing.test:8471", d.Addr())
	url, dns := "http://pricing.test.:8080", d.Addr().String()
	tests := []struct {
		name string
		make func(Observer) (interface{ Close() }, error)
	}{
		{name: "gRPC, grpc resolver", make: func(o Observer) (interface{ Close() }, error) {
			return New(Config{Source: src, Target: target, Rate: 10, Observer: o})
		}},
		{name: "gRPC, cached resolver", make: func(o Observer) (interface{ Close() }, error) {
			return New(Config{Source: src, Target: target, Resolver: ResolverCached, Rate: 10, Observer: o})
		}},
		{name: "gRPC, once resolver", make: func(o Observer) (interface{ Close() }, error) {
			return New(Config{Source: src, Target: target, Resolver: ResolverOnce, Rate: 10, Observer: o})
		}},
		{name: "HTTP", make: func(o Observer) (interface{ Close() }, error) {
			return NewHTTPClient(HTTPConfig{Source: src, URL: url, DNS: dns, Rate: 10, Observer: o})
		}},
		{name: "WebSocket", make: func(o Observer) (interface{ Close() }, error) {
			return NewWSClient(WSConfig{Source: src, URL: url, DNS: dns, Rate: 10, Observer: o})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			var obs collector
			c, err := tt.make(&obs)
			if err != nil {
				t.Fatal(err)
			}
			// grpc.NewClient starts its idle callback serializers, which
			// do no I/O and end with the channel.
			idle := goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run")
			if err := goleak.Find(before, idle); err != nil {
				t.Errorf("goroutines running after the constructor: %v", err)
			}
			c.Close()
			if q := d.Queries("pricing.test"); q != 0 {
				t.Errorf("%d DNS queries, want none", q)
			}
			if n := obs.connections(); n != 0 || len(obs.snapshot()) != 0 {
				t.Errorf("%d connections and %d results, want none", n, len(obs.snapshot()))
			}
		})
	}
}

// TestRunBlocksUntilCtxEnds: each client's Run returns only after its ctx
// ended, and once it has, nothing the client started is left running.
func TestRunBlocksUntilCtxEnds(t *testing.T) {
	grpcPod := startPod(t, "127.203.72.1")
	web := podtest.StartWeb(t, "127.203.72.2", 0, pod.WebConfig{})
	url := "http://" + web.Addr().String()
	src := netip.MustParseAddr("127.203.72.9")
	tests := []struct {
		name string
		make func(Observer) (interface{ Run(context.Context) error }, error)
	}{
		{name: "gRPC", make: func(o Observer) (interface{ Run(context.Context) error }, error) {
			return New(Config{Source: src, Target: "passthrough:///" + grpcPod, Rate: 100, Observer: o})
		}},
		{name: "HTTP", make: func(o Observer) (interface{ Run(context.Context) error }, error) {
			return NewHTTPClient(HTTPConfig{Source: src, URL: url, Rate: 100, Observer: o})
		}},
		{name: "WebSocket", make: func(o Observer) (interface{ Run(context.Context) error }, error) {
			return NewWSClient(WSConfig{Source: src, URL: url, Rate: 100, Observer: o})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			var obs collector
			c, err := tt.make(&obs)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			labtest.WaitFor(t, 10*time.Second, "a reply", func() bool { return count(obs.snapshot()).total > 0 })
			select {
			case err := <-done:
				t.Fatalf("Run returned %v before its ctx ended", err)
			default:
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			if err := goleak.Find(before); err != nil {
				t.Errorf("goroutines left after Run returned: %v", err)
			}
		})
	}
}

// TestConnectBeforeRun: Connect resolves and connects without a call, as a
// client process does when it starts, so connections are up before load.
func TestConnectBeforeRun(t *testing.T) {
	b := startBackend(t, "p", "127.203.71.11:0")
	obs := &collector{events: make(chan ConnEvent, 8)}
	c, err := New(Config{Source: netip.MustParseAddr("127.203.71.10"), Target: "passthrough:///" + b.addr.String(), Rate: 10, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Connect()
	if ev := nextEvent(t, obs.events); !ev.Open || ev.Remote != b.addr {
		t.Errorf("first event %+v, want the connection to %v opening", ev, b.addr)
	}
	if n := len(obs.snapshot()); n != 0 {
		t.Errorf("%d calls before Run, want none", n)
	}
}
