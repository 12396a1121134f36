package kubelet

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/podlog"
)

// TestCallSummary: a container writes what it served each interval (calls
// but health checks, failures, connections), nothing for one without
// calls (probes' connections alone), and passes every report on.
func TestCallSummary(t *testing.T) {
	var next countingObserver
	c := &container{out: podlog.New(), calls: &callCounter{next: &next}}
	peer := netip.MustParseAddrPort("10.244.254.1:40000")
	// Before the first interval ends: all in its line.
	c.calls.Conn(peer, true)
	for range 3 {
		c.calls.Served(peer, "/pricing.v1.Pricing/GetPrice", codes.OK)
	}
	c.calls.Served(peer, "/pricing.v1.Pricing/GetPrice", codes.Unavailable)
	c.calls.Served(peer, "/grpc.health.v1.Health/Check", codes.OK)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.summarize(ctx, 20*time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()
	lines := func() []string {
		got, _, _, _ := c.out.Read(0)
		var out []string
		for _, l := range got {
			out = append(out, l.Text)
		}
		return out
	}
	wctx := labtest.Context(t, 10*time.Second)
	if err := labtest.Poll(wctx, 5*time.Millisecond, func() bool { return len(lines()) > 0 }); err != nil {
		t.Fatal("no summary line")
	}
	want := "served 4 calls in the last 20ms (1 failed, 200.0/s); connections: 1 open, 1 opened, 0 closed"
	if got := lines(); len(got) != 1 || got[0] != want {
		t.Errorf("summary %q, want [%q]", got, want)
	}
	probe := netip.MustParseAddrPort("10.244.255.254:41000")
	c.calls.Conn(probe, true)
	c.calls.Served(probe, "/grpc.health.v1.Health/Check", codes.OK)
	c.calls.Conn(probe, false)
	time.Sleep(100 * time.Millisecond) // intervals with probes alone write nothing
	c.calls.Conn(peer, false)
	c.calls.Served(peer, "/pricing.v1.Pricing/GetPrice", codes.OK)
	if err := labtest.Poll(wctx, 5*time.Millisecond, func() bool { return len(lines()) > 1 }); err != nil {
		t.Fatal("no summary after a call")
	}
	if got := lines(); len(got) != 2 || !strings.HasPrefix(got[1], "served 1 calls") || !strings.HasSuffix(got[1], "connections: 0 open, 0 opened, 1 closed") {
		t.Errorf("lines %q: want the probe-only intervals silent, then 1 call with its interval's close", got)
	}
	if next.served != 7 || next.conns != 4 {
		t.Errorf("passed on %d calls and %d connection events, want 7 and 4", next.served, next.conns)
	}
}

type countingObserver struct {
	mu            sync.Mutex
	served, conns int
}

func (o *countingObserver) Served(netip.AddrPort, string, codes.Code) {
	o.mu.Lock()
	o.served++
	o.mu.Unlock()
}

func (o *countingObserver) Conn(netip.AddrPort, bool) {
	o.mu.Lock()
	o.conns++
	o.mu.Unlock()
}
