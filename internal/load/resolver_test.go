package load

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/plan"
	"google.golang.org/grpc/codes"
	grpcdns "google.golang.org/grpc/resolver/dns"
)

// TestResolverModes: a pick_first client talks to backend A, found by DNS;
// then DNS answers B instead and A dies. The connection loss makes the
// channel ask for a re-resolution; whether the client finds B, and when,
// depends on its resolver.
func TestResolverModes(t *testing.T) {
	const interval = 300 * time.Millisecond
	// The "grpc" resolver's interval is process-wide in grpc-go.
	grpcdns.SetMinResolutionInterval(interval)
	t.Cleanup(func() { grpcdns.SetMinResolutionInterval(30 * time.Second) })
	tests := []struct {
		name      string
		resolver  string
		ttl       time.Duration
		watch     time.Duration // how long to wait for B
		wantB     bool
		notBefore time.Duration // B must not answer earlier, from the client's start
	}{
		{name: "grpc", resolver: ResolverGRPC, watch: 10 * time.Second, wantB: true},
		{name: "cached, no cache", resolver: ResolverCached, watch: 10 * time.Second, wantB: true},
		{name: "cached, 2s TTL", resolver: ResolverCached, ttl: 2 * time.Second, watch: 10 * time.Second, wantB: true, notBefore: 2 * time.Second},
		{name: "cached forever", resolver: ResolverCached, ttl: Forever, watch: 2 * time.Second},
		{name: "once", resolver: ResolverOnce, watch: 2 * time.Second},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			net := byte(30 + i)
			a := startBackend(t, "a", fmt.Sprintf("127.203.%d.1:0", net))
			b := startBackend(t, "b", fmt.Sprintf("127.203.%d.2:%d", net, a.addr.Port()))
			d := dnstest.Start(t)
			d.Set("pricing.test", a.addr.Addr())
			var obs collector
			started := time.Now()
			start(t, Config{
				Source: netip.AddrFrom4([4]byte{127, 203, net, 9}), Target: fmt.Sprintf("dns://%s/pricing.test:%d", d.Addr(), a.addr.Port()),
				Rate: 100, Timeout: 500 * time.Millisecond, Observer: &obs,
				Resolver: tt.resolver, MinResolutionInterval: interval, CacheTTL: tt.ttl,
			})
			labtest.WaitFor(t, 10*time.Second, "a call answered by a", func() bool { return count(obs.snapshot()).pods["a"] > 0 })
			d.Set("pricing.test", b.addr.Addr())
			a.stop()
			killed := time.Now()

			answeredByB := func() bool { return count(obs.snapshot()).pods["b"] > 0 }
			deadline := time.Now().Add(tt.watch)
			for !answeredByB() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if got := answeredByB(); got != tt.wantB {
				t.Fatalf("b answered: %v, want %v (DNS queries: %d)", got, tt.wantB, d.Queries("pricing.test"))
			}
			if tt.wantB {
				for _, r := range obs.snapshot() {
					if r.Pod == "b" && r.Due.Add(r.Latency).Sub(started) < tt.notBefore {
						t.Errorf("b answered %v after the client started; want >= %v", r.Due.Add(r.Latency).Sub(started), tt.notBefore)
					}
				}
				return
			}
			if n := d.Queries("pricing.test"); n != 1 {
				t.Errorf("%d DNS queries; want 1", n)
			}
			// Calls due well after a died fail because a refuses them.
			late := count(dueAfter(obs.snapshot(), killed.Add(500*time.Millisecond)))
			if late.total == 0 || late.codes[codes.OK] != 0 || late.causes[plan.CauseRefused] != late.total {
				t.Errorf("calls after a died: codes %v causes %v; want all refused", late.codes, late.causes)
			}
		})
	}
}
