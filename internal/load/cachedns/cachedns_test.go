package cachedns

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// update is one state or error a resolver handed the channel.
type update struct {
	at    time.Time
	addrs []string
	err   error
}

// fakeCC records what a resolver hands the channel and, like grpc-go's
// ClientConn, rejects an empty address list with ErrBadResolverState.
type fakeCC struct {
	mu      sync.Mutex
	updates []update
	changed chan struct{} // signalled after each update
}

func newFakeCC() *fakeCC { return &fakeCC{changed: make(chan struct{}, 1)} }

func (f *fakeCC) record(u update) {
	f.mu.Lock()
	f.updates = append(f.updates, u)
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *fakeCC) UpdateState(s resolver.State) error {
	u := update{at: time.Now(), addrs: []string{}}
	for _, a := range s.Addresses {
		u.addrs = append(u.addrs, a.Addr)
	}
	f.record(u)
	if len(s.Addresses) == 0 {
		return balancer.ErrBadResolverState
	}
	return nil
}

func (f *fakeCC) ReportError(err error)         { f.record(update{at: time.Now(), err: err}) }
func (f *fakeCC) NewAddress([]resolver.Address) {}
func (f *fakeCC) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{}
}

func (f *fakeCC) snapshot() []update {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]update(nil), f.updates...)
}

// waitUpdates waits until at least n updates arrived or timeout passed,
// and returns what arrived.
func (f *fakeCC) waitUpdates(n int, timeout time.Duration) []update {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if u := f.snapshot(); len(u) >= n {
			return u
		}
		select {
		case <-f.changed:
		case <-deadline.C:
			return f.snapshot()
		}
	}
}

var netipEqual = cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})

const host = "pricing.shop.svc.cluster.local"

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func build(t *testing.T, b *Builder, target string) (resolver.Resolver, *fakeCC) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	cc := newFakeCC()
	r, err := b.Build(resolver.Target{URL: *u}, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, cc
}

func newBuilder(t *testing.T, cfg Config) *Builder {
	t.Helper()
	b, err := NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		name    string
		target  string
		want    Target
		wantErr bool
	}{
		{name: "full", target: "dns://127.96.0.10:53/pricing.shop.svc.cluster.local:8471",
			want: Target{Server: netip.MustParseAddrPort("127.96.0.10:53"), Host: host, Port: 8471}},
		{name: "default ports", target: "dns://127.96.0.10/pricing",
			want: Target{Server: netip.MustParseAddrPort("127.96.0.10:53"), Host: "pricing", Port: 443}},
		{name: "ip literal", target: "dns://127.0.0.1:5353/127.244.0.3:80",
			want: Target{Server: netip.MustParseAddrPort("127.0.0.1:5353"), Host: "127.244.0.3", Port: 80}},
		{name: "no authority", target: "dns:///pricing:80", wantErr: true},
		{name: "server off loopback", target: "dns://10.0.0.10:53/pricing:80", wantErr: true},
		{name: "server by name", target: "dns://kube-dns:53/pricing:80", wantErr: true},
		{name: "other scheme", target: "passthrough:///127.0.0.1:80", wantErr: true},
		{name: "named port", target: "dns://127.0.0.1/pricing:grpc", wantErr: true},
		{name: "no host", target: "dns://127.0.0.1/:80", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTarget(tt.target)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseTarget(%q) error %v, want error %v", tt.target, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, netipEqual); !tt.wantErr && diff != "" {
				t.Errorf("ParseTarget(%q) (-want +got):\n%s", tt.target, diff)
			}
		})
	}
}

func TestNewBuilderRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{CacheTTL: -2 * time.Second}, {MinResolutionInterval: -1}, {Timeout: -time.Second}} {
		if _, err := NewBuilder(cfg); err == nil {
			t.Errorf("NewBuilder(%+v) succeeded, want an error", cfg)
		}
	}
}

// TestResolveNowSchedule checks grpc-go's schedule: one resolution at
// start, an early ResolveNow held until MinResolutionInterval has passed,
// ResolveNows folded, and no re-resolution without ResolveNow.
func TestResolveNowSchedule(t *testing.T) {
	const interval = 300 * time.Millisecond
	d := dnstest.Start(t)
	d.Set(host, ip("127.244.0.1"))
	source := ip("127.203.7.1")
	b := newBuilder(t, Config{MinResolutionInterval: interval, Source: source})
	r, cc := build(t, b, fmt.Sprintf("dns://%s/%s:8471", d.Addr(), host))

	first := cc.waitUpdates(1, 10*time.Second)
	if len(first) != 1 || first[0].err != nil {
		t.Fatalf("first updates %+v; want one state", first)
	}
	d.Set(host, ip("127.244.0.2"))
	for range 5 {
		r.ResolveNow(resolver.ResolveNowOptions{})
	}
	got := cc.waitUpdates(2, 10*time.Second)
	if len(got) != 2 {
		t.Fatalf("%d updates after ResolveNow; want 2", len(got))
	}
	if gap := got[1].at.Sub(got[0].at); gap < interval {
		t.Errorf("second resolution %v after the first; want >= MinResolutionInterval %v", gap, interval)
	}
	if diff := cmp.Diff([]string{"127.244.0.2:8471"}, got[1].addrs); diff != "" {
		t.Errorf("second state (-want +got):\n%s", diff)
	}
	// The five ResolveNows fold: the watcher remembers one request at most
	// while it waits out the interval, so at most one more resolution
	// follows, and nothing re-resolves on a timer.
	if extra := cc.waitUpdates(4, 5*interval); len(extra) > 3 {
		t.Errorf("%d updates after five ResolveNows; want 2 or 3", len(extra))
	}
	settled := len(cc.snapshot())
	if extra := cc.waitUpdates(settled+1, 3*interval); len(extra) != settled {
		t.Errorf("%d updates without ResolveNow; want %d", len(extra), settled)
	}
	if n := d.Queries(host); n != settled {
		t.Errorf("%d DNS queries; want %d", n, settled)
	}
	// Long after the interval, a ResolveNow resolves again.
	r.ResolveNow(resolver.ResolveNowOptions{})
	if got := cc.waitUpdates(settled+1, 10*time.Second); len(got) != settled+1 {
		t.Errorf("%d updates after a late ResolveNow; want %d", len(got), settled+1)
	}
	if diff := cmp.Diff([]netip.Addr{source}, d.Sources(), netipEqual); diff != "" {
		t.Errorf("query sources (-want +got):\n%s", diff)
	}
}

// TestCacheTTL: with ResolveNow called every 50 ms, a changed answer shows
// after MinResolutionInterval with no cache, after the TTL with one, and
// never with Forever.
func TestCacheTTL(t *testing.T) {
	const interval = 300 * time.Millisecond
	tests := []struct {
		name       string
		ttl        time.Duration
		watch      time.Duration // how long to keep calling ResolveNow
		wantChange bool
		notBefore  time.Duration // the change must not show earlier
	}{
		{name: "no cache", ttl: 0, watch: 10 * time.Second, wantChange: true, notBefore: interval},
		{name: "2s", ttl: 2 * time.Second, watch: 10 * time.Second, wantChange: true, notBefore: 2 * time.Second},
		{name: "forever", ttl: Forever, watch: 2500 * time.Millisecond, wantChange: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := dnstest.Start(t)
			d.Set(host, ip("127.244.0.1"))
			b := newBuilder(t, Config{MinResolutionInterval: interval, CacheTTL: tt.ttl})
			r, cc := build(t, b, fmt.Sprintf("dns://%s/%s:8471", d.Addr(), host))
			first := cc.waitUpdates(1, 10*time.Second)
			if len(first) == 0 || first[0].err != nil {
				t.Fatalf("first updates %+v; want a state", first)
			}
			d.Set(host, ip("127.244.0.2"))
			changedAt := watchForChange(r, cc, tt.watch)
			switch {
			case tt.wantChange && changedAt.IsZero():
				t.Fatalf("answer change not seen within %v", tt.watch)
			case !tt.wantChange && !changedAt.IsZero():
				t.Fatalf("answer change seen after %v; want never", changedAt.Sub(first[0].at))
			case tt.wantChange && changedAt.Sub(first[0].at) < tt.notBefore:
				t.Errorf("answer change seen after %v; want >= %v", changedAt.Sub(first[0].at), tt.notBefore)
			}
			if !tt.wantChange && d.Queries(host) != 1 {
				t.Errorf("%d DNS queries; want 1", d.Queries(host))
			}
		})
	}
}

// watchForChange calls ResolveNow every 50 ms until a state with
// 127.244.0.2 arrives or watch passes; it returns that state's time.
func watchForChange(r resolver.Resolver, cc *fakeCC, watch time.Duration) time.Time {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(watch)
	for time.Now().Before(end) {
		r.ResolveNow(resolver.ResolveNowOptions{})
		for _, u := range cc.snapshot() {
			if len(u.addrs) == 1 && u.addrs[0] == "127.244.0.2:8471" {
				return u.at
			}
		}
		<-tick.C
	}
	return time.Time{}
}

// TestEmptyAnswerRetriesWithBackoff: a name with no addresses gives the
// channel an empty list; the channel rejects it and the resolver polls
// with backoff, without ResolveNow, until addresses appear.
func TestEmptyAnswerRetriesWithBackoff(t *testing.T) {
	d := dnstest.Start(t)
	b := newBuilder(t, Config{MinResolutionInterval: 100 * time.Millisecond})
	_, cc := build(t, b, fmt.Sprintf("dns://%s/%s:8471", d.Addr(), host))
	first := cc.waitUpdates(1, 10*time.Second)
	if len(first) != 1 || len(first[0].addrs) != 0 || first[0].err != nil {
		t.Fatalf("first update %+v; want an empty state (NXDOMAIN)", first)
	}
	d.Set(host, ip("127.244.0.9"))
	got := cc.waitUpdates(2, 10*time.Second)
	if len(got) < 2 {
		t.Fatal("no retry after an empty answer")
	}
	if gap := got[1].at.Sub(got[0].at); gap < time.Second {
		t.Errorf("retried after %v; want the 1.6 s (±20%%) backoff", gap)
	}
	if diff := cmp.Diff([]string{"127.244.0.9:8471"}, got[1].addrs); diff != "" {
		t.Errorf("state after retry (-want +got):\n%s", diff)
	}
}

func TestLookup(t *testing.T) {
	d := dnstest.Start(t)
	var many []netip.Addr
	for i := range 100 {
		many = append(many, netip.AddrFrom4([4]byte{127, 244, 1, byte(i)}))
	}
	d.Set("many.test", many...)
	d.Set("none.test")
	d.Set("one.test", ip("127.244.0.1"))
	// A UDP socket that never answers.
	silent, err := loopback.ListenPacket(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	tests := []struct {
		name    string
		server  netip.AddrPort
		host    string
		want    []netip.Addr
		wantErr bool
	}{
		{name: "one", server: d.Addr(), host: "one.test", want: []netip.Addr{ip("127.244.0.1")}},
		{name: "truncated over udp, whole over tcp", server: d.Addr(), host: "many.test", want: many},
		{name: "empty answer", server: d.Addr(), host: "none.test"},
		{name: "nxdomain", server: d.Addr(), host: "missing.test"},
		{name: "ip literal", server: d.Addr(), host: "127.1.2.3", want: []netip.Addr{ip("127.1.2.3")}},
		{name: "server off loopback", server: netip.MustParseAddrPort("192.0.2.1:53"), host: "one.test", wantErr: true},
		{name: "no answer", server: loopback.AddrPort(silent.LocalAddr()), host: "one.test", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			got, err := Lookup(ctx, tt.server, nil, tt.host)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Lookup error %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, netipEqual); diff != "" {
				t.Errorf("Lookup (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLookupErrorIsReported: a DNS server that does not answer makes the
// resolver report an error to the channel; Close during the lookup
// returns without waiting for the query timeout.
func TestLookupErrorIsReported(t *testing.T) {
	silent, err := loopback.ListenPacket(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	b := newBuilder(t, Config{Timeout: 200 * time.Millisecond})
	r, cc := build(t, b, fmt.Sprintf("dns://%s/%s:8471", silent.LocalAddr(), host))
	got := cc.waitUpdates(1, 10*time.Second)
	if len(got) != 1 || got[0].err == nil {
		t.Fatalf("updates %+v; want one error", got)
	}
	// The retry (after ~1.6 s) is pending or in flight; Close must not hang.
	closed := make(chan struct{})
	go func() {
		r.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

func TestIPLiteralIsNotResolved(t *testing.T) {
	d := dnstest.Start(t)
	b := newBuilder(t, Config{})
	_, cc := build(t, b, fmt.Sprintf("dns://%s/127.244.0.3:80", d.Addr()))
	got := cc.waitUpdates(1, 10*time.Second)
	if len(got) != 1 || len(got[0].addrs) != 1 || got[0].addrs[0] != "127.244.0.3:80" {
		t.Errorf("updates %+v; want one state with 127.244.0.3:80", got)
	}
	if n := d.Queries("127.244.0.3"); n != 0 {
		t.Errorf("%d queries; want none", n)
	}
}
