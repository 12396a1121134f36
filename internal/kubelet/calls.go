package kubelet

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/pod"
)

// callSummaryEvery is how often a container writes what it served to its
// output, as a server's periodic access summary: `kubectl logs` shows
// whether a pod gets calls without a metrics stack.
const callSummaryEvery = 10 * time.Second

// healthPrefix begins the methods of gRPC's health service, which
// probes call: they are not counted as calls.
const healthPrefix = "/grpc.health.v1.Health/"

// callCounter counts a container's calls (but health checks) and connections, passing every
// report on to next (nil: none). Safe for concurrent use.
type callCounter struct {
	next                   pod.Observer
	calls, failed          atomic.Int64
	opened, closed         atomic.Int64
	lastCalls, lastFailed  int64 // summarize's goroutine only
	lastOpened, lastClosed int64
}

func (c *callCounter) Served(peer netip.AddrPort, method string, code codes.Code) {
	if !strings.HasPrefix(method, healthPrefix) {
		c.calls.Add(1)
		if code != codes.OK {
			c.failed.Add(1)
		}
	}
	if c.next != nil {
		c.next.Served(peer, method, code)
	}
}

func (c *callCounter) Conn(peer netip.AddrPort, open bool) {
	if open {
		c.opened.Add(1)
	} else {
		c.closed.Add(1)
	}
	if c.next != nil {
		c.next.Conn(peer, open)
	}
}

// summarize writes, every interval until ctx ends, a line with the calls
// and connections of that interval to c's output, when it had calls.
func (c *container) summarize(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	k := c.calls
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		calls, failed, opened, closed := k.calls.Load(), k.failed.Load(), k.opened.Load(), k.closed.Load()
		dc, df, do, dx := calls-k.lastCalls, failed-k.lastFailed, opened-k.lastOpened, closed-k.lastClosed
		k.lastCalls, k.lastFailed, k.lastOpened, k.lastClosed = calls, failed, opened, closed
		if dc == 0 {
			continue // probes' connections alone are no traffic
		}
		c.out.Printf("served %d calls in the last %s (%d failed, %.1f/s); connections: %d open, %d opened, %d closed",
			dc, interval, df, float64(dc)/interval.Seconds(), opened-closed, do, dx)
	}
}
