package load

import (
	"context"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"google.golang.org/grpc/codes"
)

// closes records WSConfig.OnClose calls.
type closes struct {
	mu       sync.Mutex
	statuses []int
}

func (c *closes) add(_ netip.AddrPort, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, status)
}

func (c *closes) get() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.statuses...)
}

// startWS runs a WebSocket client until the returned stop is called (or
// the test ends); stop waits for Run to return.
func startWS(t *testing.T, cfg WSConfig) (*WSClient, func()) {
	t.Helper()
	c, err := NewWSClient(cfg)
	return c, running(t, c, err)
}

// TestWSClientReconnectsAfterGoingAway: a graceful Stop of the pod the
// WebSocket is pinned to sends close 1001; the client reconnects, through
// the VIP or by resolving the name again, and lands on the other pod,
// where its messages then go.
func TestWSClientReconnectsAfterGoingAway(t *testing.T) {
	tests := []struct {
		name    string
		first   int
		viaDNS  bool
		wantDNS int
	}{
		{name: "via a ClusterIP", first: 61},
		{name: "via a DNS name", first: 71, viaDNS: true, wantDNS: 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := startPodsOnOnePort(t, "127.244.0.", tt.first, 2, pod.WebConfig{})
			cfg := WSConfig{Source: netip.AddrFrom4([4]byte{127, 206, 6, byte(10 + i)}), Rate: 200}
			var d *dnstest.Server
			if tt.viaDNS {
				d = dnstest.StartWith(t, dnstest.Options{IP: netip.MustParseAddr("127.206.6.53"), Rotate: true})
				d.Set("pricing.shop.svc.cluster.local", podIPs(pods)...)
				cfg.DNS, cfg.URL = d.Addr().String(), "http://pricing.shop.svc.cluster.local.:"+strconv.Itoa(int(pods[0].Addr().Port()))
			} else {
				cfg.URL = startForwarder(t, "127.96.201."+strconv.Itoa(10+i), pods[0].Addr(), pods[1].Addr()).URL()
			}
			var obs collector
			var cl closes
			cfg.Observer, cfg.OnClose = &obs, cl.add
			_, stop := startWS(t, cfg)
			labtest.WaitFor(t, 10*time.Second, "replies", func() bool { cs := count(obs.snapshot()).codes; return cs[codes.OK] >= 20 })
			byPod := count(obs.snapshot()).pods
			if len(byPod) != 1 {
				t.Fatalf("replies by pod %v before any stop; want one pod", byPod)
			}
			first, second := pods[0], pods[1]
			if byPod["pod-"+first.Addr().Addr().String()] == 0 {
				first, second = second, first
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := first.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			labtest.WaitFor(t, 10*time.Second, "replies from the other pod", func() bool { return count(obs.snapshot()).pods["pod-"+second.Addr().Addr().String()] >= 20 })
			stop()
			if got := cl.get(); len(got) != 1 || got[0] != 1001 {
				t.Errorf("OnClose statuses %v, want one 1001 (going away)", got)
			}
			tl := count(obs.snapshot())
			cs, byPod := tl.codes, tl.pods
			t.Logf("codes %v, per pod %v", cs, byPod)
			for code, n := range cs {
				if code != codes.OK && code != codes.Unavailable {
					t.Errorf("%d messages failed with %v; want only OK, or UNAVAILABLE for those sent as the pod went away", n, code)
				}
			}
			if o, c := obs.conns(); o != 2 || c != 2 {
				t.Errorf("client observer: %d connections opened, %d closed; want 2 and 2", o, c)
			}
			if d != nil && d.Queries("pricing.shop.svc.cluster.local") != tt.wantDNS {
				t.Errorf("%d DNS queries, want %d: one per connection", d.Queries("pricing.shop.svc.cluster.local"), tt.wantDNS)
			}
		})
	}
}

// TestWSClientReconnectsAfterKill: without a close frame the client sees
// 1006 and reconnects too.
func TestWSClientReconnectsAfterKill(t *testing.T) {
	a := podtest.StartWeb(t, "127.244.0.63", 0, pod.WebConfig{})
	b := podtest.StartWeb(t, "127.244.0.64", 0, pod.WebConfig{})
	vip := startForwarder(t, "127.96.201.2", a.Addr(), b.Addr())
	var obs collector
	var cl closes
	startWS(t, WSConfig{Source: netip.MustParseAddr("127.206.6.2"), URL: vip.URL(), Rate: 200, Observer: &obs, OnClose: cl.add})
	labtest.WaitFor(t, 10*time.Second, "replies from the first pod", func() bool { return count(obs.snapshot()).pods["pod-127.244.0.63"] >= 20 })
	a.Kill()
	labtest.WaitFor(t, 10*time.Second, "replies from the second pod", func() bool { return count(obs.snapshot()).pods["pod-127.244.0.64"] >= 20 })
	if got := cl.get(); len(got) != 1 || got[0] != WSStatusNoCloseFrame {
		t.Errorf("OnClose statuses %v, want one %d (no close frame)", got, WSStatusNoCloseFrame)
	}
}

// TestWSClientRestart: Restart opens a new connection (the forwarder sends
// it to the next pod) and closes the old one without failing a message.
func TestWSClientRestart(t *testing.T) {
	rec := &podtest.Recorder{}
	a := podtest.StartWeb(t, "127.244.0.65", 0, pod.WebConfig{Observer: rec})
	b := podtest.StartWeb(t, "127.244.0.66", 0, pod.WebConfig{})
	vip := startForwarder(t, "127.96.201.3", a.Addr(), b.Addr())
	var obs collector
	var cl closes
	c, stop := startWS(t, WSConfig{Source: netip.MustParseAddr("127.206.6.3"), URL: vip.URL(), Rate: 200, Observer: &obs, OnClose: cl.add})
	labtest.WaitFor(t, 10*time.Second, "replies from the first pod", func() bool { return count(obs.snapshot()).pods["pod-127.244.0.65"] >= 20 })
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "replies from the second pod", func() bool { return count(obs.snapshot()).pods["pod-127.244.0.66"] >= 20 })
	labtest.WaitFor(t, 10*time.Second, "the first pod's connection closed", func() bool { _, c := rec.Conns(); return c == 1 })
	stop()
	if cs := count(obs.snapshot()).codes; len(cs) != 1 {
		t.Errorf("codes %v across a restart; want only OK", cs)
	}
	if got := cl.get(); len(got) != 0 {
		t.Errorf("OnClose called with %v for connections the client closed itself", got)
	}
	if err := c.Restart(); err == nil {
		t.Error("Restart after Run returned succeeded, want an error")
	}
}

// TestWSClientWithoutServer: connects keep failing; messages fail as
// UNAVAILABLE while the client backs off, and Close returns.
func TestWSClientWithoutServer(t *testing.T) {
	var obs collector
	_, stop := startWS(t, WSConfig{Source: netip.MustParseAddr("127.206.6.4"), URL: "http://127.244.0.67:1", Rate: 100, Timeout: 100 * time.Millisecond, Observer: &obs})
	labtest.WaitFor(t, 10*time.Second, "failed messages", func() bool { cs := count(obs.snapshot()).codes; return cs[codes.Unavailable] >= 5 })
	stop()
	cs := count(obs.snapshot()).codes
	for code, n := range cs {
		if code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("%d messages ended %v; want only UNAVAILABLE or DEADLINE_EXCEEDED", n, code)
		}
	}
}
