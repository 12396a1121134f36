package load

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/plan"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCauseOf classifies status errors carrying the messages grpc-go v1.85
// produces (copied from failures seen in TestCausesFromRealFailures).
func TestCauseOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want plan.Cause
	}{
		{name: "ok", err: nil, want: ""},
		{name: "refused", err: status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.203.10.9:0->127.203.10.1:1: connect: connection refused"`), want: plan.CauseRefused},
		{name: "refused, waited for ready", err: status.Error(codes.DeadlineExceeded, `context deadline exceeded: latest balancer error: connection error: desc = "transport: Error while dialing: dial tcp 127.203.10.9:0->127.203.10.1:1: connect: connection refused"`), want: plan.CauseRefused},
		{name: "dial timeout", err: status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.203.11.9:0->127.203.11.1:33333: i/o timeout"`), want: plan.CauseConnectTimeout},
		{name: "deadline while connecting", err: status.Error(codes.DeadlineExceeded, "context deadline exceeded while waiting for connections to become ready"), want: plan.CauseConnectTimeout},
		{name: "eof", err: status.Error(codes.Unavailable, `error reading from server: EOF`), want: plan.CauseGoAway},
		{name: "eof after goaway", err: status.Error(codes.Unavailable, `closing transport due to: connection error: desc = "error reading from server: EOF", received prior goaway: code: NO_ERROR, debug data: "graceful_stop"`), want: plan.CauseGoAway},
		{name: "draining", err: status.Error(codes.Unavailable, "the connection is draining"), want: plan.CauseGoAway},
		{name: "reset", err: status.Error(codes.Unavailable, `error reading from server: connection reset by peer`), want: plan.CauseReset},
		{name: "reset after goaway", err: status.Error(codes.Unavailable, `closing transport due to: connection error: desc = "error reading from server: connection reset by peer", received prior goaway: code: NO_ERROR, debug data: "graceful_stop"`), want: plan.CauseReset},
		{name: "deadline", err: status.Error(codes.DeadlineExceeded, "context deadline exceeded"), want: plan.CauseDeadline},
		{name: "zero addresses", err: status.Error(codes.Unavailable, "name resolver error: produced zero addresses"), want: plan.CauseNoAddress},
		{name: "resolver failed", err: status.Error(codes.Unavailable, "name resolver error: cachedns: A record lookup error: read udp: i/o timeout"), want: plan.CauseNoAddress},
		{name: "server said unavailable", err: status.Error(codes.Unavailable, "the backend answers Unavailable"), want: plan.CauseUnavailable},
		{name: "server said internal", err: status.Error(codes.Internal, "connection refused upstream"), want: plan.CauseOther},
		{name: "not a status", err: fmt.Errorf("boom"), want: plan.CauseOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CauseOf(tt.err); got != tt.want {
				t.Errorf("CauseOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// TestCausesFromRealFailures produces each cause with real servers and
// sockets on loopback and checks how the client's failed calls are
// classified.
func TestCausesFromRealFailures(t *testing.T) {
	d := dnstest.Start(t)
	d.Set("empty.test")
	tests := []struct {
		name   string
		want   plan.Cause   // at least one failure has this cause
		others []plan.Cause // other causes allowed among the failures
		run    func(t *testing.T, src netip.Addr, obs *collector) (stop func())
	}{
		{name: "nothing listening", want: plan.CauseRefused, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			_, stop := start(t, Config{Source: src, Target: "passthrough:///127.203.10.1:1", Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "nothing listening, wait for ready", want: plan.CauseRefused, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			_, stop := start(t, Config{Source: src, Target: "passthrough:///127.203.10.1:1", Rate: 50, Timeout: 200 * time.Millisecond, WaitForReady: true, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "connect times out", want: plan.CauseConnectTimeout, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			bh := startBlackhole(t, "127.203.11.1")
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + bh.addr.String(), Rate: 20, Timeout: 5 * time.Second, ConnectTimeout: 100 * time.Millisecond, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "deadline while connecting", want: plan.CauseConnectTimeout, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			bh := startBlackhole(t, "127.203.12.1")
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + bh.addr.String(), Rate: 20, Timeout: 200 * time.Millisecond, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "server stopped mid-call", want: plan.CauseGoAway, others: []plan.Cause{plan.CauseRefused}, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			b := startBackend(t, "b", "127.203.13.1:0")
			b.delay.Store(int64(time.Minute))
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + b.addr.String(), Rate: 20, Timeout: 10 * time.Second, Observer: obs})
			<-b.entered
			b.stop()
			waitFailures(t, obs, 1)
			return stop
		}},
		{name: "server stopped after GOAWAY", want: plan.CauseGoAway, others: []plan.Cause{plan.CauseRefused}, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			b := startBackend(t, "b", "127.203.14.1:0")
			b.delay.Store(int64(time.Minute))
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + b.addr.String(), Rate: 20, Timeout: 10 * time.Second, Observer: obs})
			<-b.entered
			graceful := make(chan struct{})
			go func() {
				defer close(graceful)
				b.srv.GracefulStop()
			}()
			time.Sleep(200 * time.Millisecond) // the grace period
			b.stop()
			<-graceful
			waitFailures(t, obs, 1)
			return stop
		}},
		{name: "connection reset", want: plan.CauseReset, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			b := startBackend(t, "b", "127.203.15.1:0")
			b.delay.Store(int64(time.Minute))
			p := startResetProxy(t, "127.203.15.2:0", b.addr.String())
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + p.addr(), Rate: 20, Timeout: 10 * time.Second, Observer: obs})
			<-b.entered
			b.delay.Store(0)
			p.reset()
			waitFailures(t, obs, 1)
			return stop
		}},
		{name: "slow server", want: plan.CauseDeadline, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			b := startBackend(t, "b", "127.203.16.1:0")
			b.delay.Store(int64(time.Minute))
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + b.addr.String(), Rate: 20, Timeout: 100 * time.Millisecond, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "empty answer, grpc resolver", want: plan.CauseNoAddress, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			_, stop := start(t, Config{Source: src, Target: fmt.Sprintf("dns://%s/empty.test:8471", d.Addr()), Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "nxdomain, grpc resolver", want: plan.CauseNoAddress, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			_, stop := start(t, Config{Source: src, Target: fmt.Sprintf("dns://%s/missing.test:8471", d.Addr()), Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "empty answer, cached resolver", want: plan.CauseNoAddress, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			_, stop := start(t, Config{Source: src, Target: fmt.Sprintf("dns://%s/empty.test:8471", d.Addr()), Resolver: ResolverCached, Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "empty answer, once resolver", want: plan.CauseNoAddress, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			_, stop := start(t, Config{Source: src, Target: fmt.Sprintf("dns://%s/empty.test:8471", d.Addr()), Resolver: ResolverOnce, Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "no DNS answering, once resolver", want: plan.CauseNoAddress, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			// Nothing listens on port 1: the lookup fails at once.
			_, stop := start(t, Config{Source: src, Target: "dns://127.203.19.2:1/pricing.test:8471", Resolver: ResolverOnce, Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "no DNS answering, once resolver, round_robin", want: plan.CauseNoAddress, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			_, stop := start(t, Config{Source: src, Target: "dns://127.203.19.3:1/pricing.test:8471", Resolver: ResolverOnce, Policy: "round_robin", Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "server answers UNAVAILABLE", want: plan.CauseUnavailable, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			b := startBackend(t, "b", "127.203.17.1:0")
			b.code.Store(uint32(codes.Unavailable))
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + b.addr.String(), Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
		{name: "server answers INTERNAL", want: plan.CauseOther, run: func(t *testing.T, src netip.Addr, obs *collector) func() {
			b := startBackend(t, "b", "127.203.18.1:0")
			b.code.Store(uint32(codes.Internal))
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + b.addr.String(), Rate: 50, Observer: obs})
			waitFailures(t, obs, 3)
			return stop
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var obs collector
			src := netip.AddrFrom4([4]byte{127, 203, 20, byte(i + 1)})
			tt.run(t, src, &obs)() // stop: every call has finished
			seen := false
			logged := map[plan.Cause]bool{}
			for _, r := range obs.snapshot() {
				if r.Code == codes.OK {
					continue
				}
				seen = seen || r.Cause == tt.want
				if !logged[r.Cause] {
					logged[r.Cause] = true
					t.Logf("%s: %v", r.Cause, r.Err)
				}
				if r.Cause != tt.want && !slices.Contains(tt.others, r.Cause) {
					t.Errorf("call failed with cause %q (%v); want %q or %q", r.Cause, r.Err, tt.want, tt.others)
				}
			}
			if !seen {
				t.Errorf("no call failed with cause %q", tt.want)
			}
		})
	}
}

// waitFailures waits until n calls have failed.
func waitFailures(t *testing.T, obs *collector, n int) {
	t.Helper()
	labtest.WaitFor(t, 15*time.Second, fmt.Sprintf("%d failed calls", n), func() bool {
		return count(obs.snapshot()).total-count(obs.snapshot()).codes[codes.OK] >= n
	})
}
