package proxy

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The VIPs of the socket tests in this file live in 127.201.78.20 and up,
// their backends and clients in 127.202.30.0 to 127.202.32.255 and
// 127.202.41.0 to 127.202.46.255.

func TestAffinityTimeout(t *testing.T) {
	secs := func(s int32) *v1.SessionAffinityConfig {
		return &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &s}}
	}
	tests := []struct {
		name     string
		affinity v1.ServiceAffinity
		config   *v1.SessionAffinityConfig
		want     time.Duration
	}{
		{"unset", "", nil, 0},
		{"None", v1.ServiceAffinityNone, secs(5), 0},
		{"ClientIP without config: API default", v1.ServiceAffinityClientIP, nil, 3 * time.Hour},
		{"ClientIP without timeoutSeconds", v1.ServiceAffinityClientIP, &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{}}, 3 * time.Hour},
		{"ClientIP 1 s", v1.ServiceAffinityClientIP, secs(1), time.Second},
		{"ClientIP 86400 s", v1.ServiceAffinityClientIP, secs(86400), 24 * time.Hour},
		{"ClientIP 0 s: invalid, default", v1.ServiceAffinityClientIP, secs(0), 3 * time.Hour},
		{"ClientIP 86401 s: invalid, default", v1.ServiceAffinityClientIP, secs(86401), 3 * time.Hour},
		{"unknown affinity: None", "Cookie", secs(5), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Proxier{log: slog.New(slog.DiscardHandler), warned: map[string]bool{}}
			svc := labtest.Service(ns, "pricing", "127.96.0.1")
			svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig = tt.affinity, tt.config
			if got := p.affinityTimeout(types.NamespacedName{Namespace: ns, Name: "pricing"}, svc); got != tt.want {
				t.Errorf("affinityTimeout() = %v, want %v", got, tt.want)
			}
		})
	}
}

// countingPicker always picks the first endpoint and counts its calls.
type countingPicker struct{ n int }

func (c *countingPicker) pick(eps []Endpoint) Endpoint {
	c.n++
	return eps[0]
}

// TestRecentListLimit: an xt_recent list remembers 100 clients, so the
// 101st client to one endpoint evicts the least recent; nftables sets and
// IPVS templates have no such limit.
func TestRecentListLimit(t *testing.T) {
	tests := []struct {
		mode        Mode
		wantEvicted bool
	}{
		{ModeIPTables, true},
		{ModeNFTables, false},
		{ModeIPVS, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			s := newSticky(tt.mode)
			tab := &table{eps: lbEndpoints(1), affinity: time.Hour}
			pk := &countingPicker{}
			now := time.Unix(1_800_000_000, 0)
			client := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}) }
			visit := func(i int) {
				_, hold := s.choose(client(i), tab, now, pk)
				if hold != nil {
					hold.release(now)
				}
				now = now.Add(time.Second)
			}
			visit(1)
			visit(2)
			visit(1) // 1 is now more recent than 2
			for i := 3; i <= 101; i++ {
				visit(i)
			}
			picks := pk.n
			visit(1)
			if evicted := pk.n > picks; evicted {
				t.Errorf("client 1, used recently, was forgotten")
			}
			picks = pk.n
			visit(2)
			if evicted := pk.n > picks; evicted != tt.wantEvicted {
				t.Errorf("client 2 (least recent of 101) forgotten = %v, want %v", evicted, tt.wantEvicted)
			}
		})
	}
}

// TestAffinityAcrossEndpointReturn: a client's endpoint leaves and comes
// back while the client makes no connection. In iptables and nftables modes
// the entry died with the endpoint's rules (xt_recent list, nftables set), so
// the client is placed anew; an IPVS template outlives its real server
// (kept in the trash) and applies again.
func TestAffinityAcrossEndpointReturn(t *testing.T) {
	tests := []struct {
		mode     Mode
		wantBack bool
	}{
		{ModeIPTables, false},
		{ModeNFTables, false},
		{ModeIPVS, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			s := newSticky(tt.mode)
			install := func(eps []Endpoint) *table {
				tab := &table{eps: eps, affinity: time.Hour}
				s.update(tab)
				return tab
			}
			client := netip.MustParseAddr("127.1.0.1")
			now := time.Unix(1_800_000_000, 0)
			choose := func(tab *table, pk picker) string {
				ep, hold := s.choose(client, tab, now, pk)
				if hold != nil {
					hold.release(now)
				}
				now = now.Add(time.Second)
				return ep.Pod
			}
			if got := choose(install(lbEndpoints(1, 2)), lastPicker{}); got != "ep-2" {
				t.Fatalf("first connection: %s, want ep-2", got)
			}
			install(lbEndpoints(1))
			pk := &countingPicker{}
			got := choose(install(lbEndpoints(1, 2)), pk)
			want, wantPicks := "ep-1", 1
			if tt.wantBack {
				want, wantPicks = "ep-2", 0
			}
			if got != want || pk.n != wantPicks {
				t.Errorf("after ep-2 left and returned: %s with %d picks, want %s with %d", got, pk.n, want, wantPicks)
			}
		})
	}
}

// lastPicker always picks the last endpoint.
type lastPicker struct{}

func (lastPicker) pick(eps []Endpoint) Endpoint { return eps[len(eps)-1] }

// TestTemplateAlive replays an IPVS persistence template's timer: made at
// t0 with timeout 10 s, so it first fires at t0+10s.
func TestTemplateAlive(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name        string
		open        int
		idleSince   time.Duration
		now         time.Duration
		want        bool
		wantTimeout time.Duration
	}{
		{"before the timer fires", 0, time.Second, 9 * time.Second, true, 10 * time.Second},
		{"idle when it fires", 0, time.Second, 10 * time.Second, false, 10 * time.Second},
		{"connection still open, long after", 1, 0, time.Hour, true, time.Minute},
		{"closed after the first firing, before the next", 0, 30 * time.Second, 69 * time.Second, true, time.Minute},
		{"closed after the first firing, at the next", 0, 30 * time.Second, 70 * time.Second, false, time.Minute},
		{"closed after the second firing", 0, 75 * time.Second, 129 * time.Second, true, time.Minute},
		{"closed after the second firing, third fires", 0, 75 * time.Second, 130 * time.Second, false, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := &template{timeout: 10 * time.Second, deadline: at(10 * time.Second), open: tt.open, idleSince: at(tt.idleSince)}
			if got := tp.alive(at(tt.now)); got != tt.want {
				t.Errorf("alive(t0+%v) = %v, want %v", tt.now, got, tt.want)
			}
			if tt.want && tp.timeout != tt.wantTimeout {
				t.Errorf("timeout after alive = %v, want %v", tp.timeout, tt.wantTimeout)
			}
		})
	}
}

// TestAffinityOffForgets: turning sessionAffinity off forgets every entry,
// so turning it on again places clients anew.
func TestAffinityOffForgets(t *testing.T) {
	for _, mode := range []Mode{ModeIPTables, ModeNFTables, ModeIPVS} {
		t.Run(string(mode), func(t *testing.T) {
			s := newSticky(mode)
			on := &table{eps: lbEndpoints(1, 2), affinity: time.Hour}
			client := netip.MustParseAddr("127.1.0.1")
			now := time.Unix(1_800_000_000, 0)
			if _, hold := s.choose(client, on, now, lastPicker{}); hold != nil {
				hold.release(now)
			}
			s.update(&table{eps: on.eps})
			s.update(on)
			pk := &countingPicker{}
			if ep, _ := s.choose(client, on, now.Add(time.Second), pk); ep.Pod != "ep-1" || pk.n != 1 {
				t.Errorf("after affinity off and on: %s with %d picks, want ep-1 with 1", ep.Pod, pk.n)
			}
		})
	}
}

// fakeClock is the clock of affinity timeouts in tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func withClock(c *fakeClock) func(*Proxier) {
	return func(p *Proxier) { p.now = c.Now }
}

// affinityService is a ClusterIP Service with sessionAffinity ClientIP and
// the given timeoutSeconds.
func affinityService(name, clusterIP string, timeoutSeconds int32, ports ...v1.ServicePort) *v1.Service {
	svc := labtest.Service(ns, name, clusterIP, ports...)
	svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeoutSeconds}}
	return svc
}

// endpointsOf is the eligible-endpoint list the proxy builds for bs (given in
// address order).
func endpointsOf(bs ...*backend) []Endpoint {
	eps := make([]Endpoint, len(bs))
	for i, b := range bs {
		eps[i] = Endpoint{Addr: b.addr, Pod: b.name}
	}
	return eps
}

func without(eps []Endpoint, pod string) []Endpoint {
	var out []Endpoint
	for _, e := range eps {
		if e.Pod != pod {
			out = append(out, e)
		}
	}
	return out
}

// distinctSeed returns the first seed from 1 whose first three picks for vip
// over eps are a, b, c with b != a and c != a, so that tests can tell a new
// pick from a kept one.
func distinctSeed(mode Mode, vip netip.AddrPort, eps []Endpoint) uint64 {
	for seed := uint64(1); ; seed++ {
		pk := newPicker(mode, seed, vip)
		a, b, c := pk.pick(eps), pk.pick(eps), pk.pick(eps)
		if b != a && c != a {
			return seed
		}
	}
}

// TestClientIPAffinity: with sessionAffinity ClientIP a client IP keeps its
// pod across reconnects while each reconnect comes within timeoutSeconds of
// the last; another client IP gets its own pick; after the timeout, or when
// the pod leaves, the client is placed anew; with affinity turned off every
// connection is placed anew. Expected picks come from a picker built like
// the proxy's (same Seed and VIP), advanced on every expected miss.
func TestClientIPAffinity(t *testing.T) {
	for i, mode := range []Mode{ModeIPTables, ModeNFTables, ModeIPVS} {
		t.Run(string(mode), func(t *testing.T) {
			prefix := fmt.Sprintf("127.202.3%d.", i)
			bs := startBackends(t, prefix+"1", prefix+"2", prefix+"3")
			eps := endpointsOf(bs...)
			ip := fmt.Sprintf("127.201.78.%d", 20+i)
			vip := ip + ":18211"
			ap := netip.MustParseAddrPort(vip)
			seed := distinctSeed(mode, ap, eps)
			clk := newFakeClock()
			l := newLab(t, Config{Mode: mode, Seed: seed, MinSyncPeriod: -1}, withClock(clk))
			ref := newPicker(mode, seed, ap)
			l.api.ApplyService(affinityService("pricing", ip, 1, labtest.ServicePort("grpc", 18211)))
			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready), endpoint(bs[1], labtest.Ready), endpoint(bs[2], labtest.Ready))
			l.waitEndpoints(vip, bs...)
			l.waitRule(vip, func(r *Rule) bool { return r != nil && r.Affinity == time.Second })
			clientA, clientB := prefix+"101", prefix+"102"

			x := ref.pick(eps).Pod
			seen := map[string]int{}
			for range 21 {
				seen[l.visit(vip, clientA)]++
				clk.Advance(900 * time.Millisecond)
			}
			if diff := cmp.Diff(map[string]int{x: 21}, seen); diff != "" {
				t.Fatalf("client A's 21 connections, 0.9 s apart with timeoutSeconds 1 (-want +got):\n%s", diff)
			}

			y := ref.pick(eps).Pod
			for j := range 3 {
				if got := l.visit(vip, clientB); got != y {
					t.Fatalf("client B's connection %d went to %s, want %s (A is on %s)", j, got, y, x)
				}
			}

			clk.Advance(time.Second + time.Millisecond)
			z := ref.pick(eps).Pod
			if got := l.visit(vip, clientA); got != z {
				t.Fatalf("client A after the timeout went to %s, want the new pick %s (was on %s)", got, z, x)
			}

			// The pinned pod leaves: A falls over, then sticks to the new pod.
			rest := without(eps, z)
			var keep []discovery.Endpoint
			var keepB []*backend
			for _, b := range bs {
				if b.name != z {
					keep = append(keep, endpoint(b, labtest.Ready))
					keepB = append(keepB, b)
				}
			}
			l.slice("pricing-a", "pricing", grpcPorts(bs), keep...)
			l.waitEndpoints(vip, keepB...)
			w := ref.pick(rest).Pod
			for j := range 3 {
				if got := l.visit(vip, clientA); got != w {
					t.Fatalf("client A's connection %d after %s left went to %s, want %s", j, z, got, w)
				}
				clk.Advance(500 * time.Millisecond)
			}

			// Affinity off (read from the watched Service): every
			// connection is a new pick.
			l.service("pricing", ip, labtest.ServicePort("grpc", 18211))
			l.waitRule(vip, func(r *Rule) bool { return r != nil && r.Affinity == 0 })
			var want, got []string
			for range 6 {
				want = append(want, ref.pick(rest).Pod)
				got = append(got, l.visit(vip, clientA))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("client A with sessionAffinity None (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAffinityWhileConnected: an open connection does not keep an iptables
// or nftables affinity entry alive (only new connections refresh it), but it
// holds an IPVS persistence template, which then lives on 60 s at a time.
func TestAffinityWhileConnected(t *testing.T) {
	tests := []struct {
		mode Mode
		held bool // an open connection keeps the client's pod
	}{
		{ModeIPTables, false},
		{ModeNFTables, false},
		{ModeIPVS, true},
	}
	for i, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			prefix := fmt.Sprintf("127.202.4%d.", i+1)
			bs := startBackends(t, prefix+"1", prefix+"2", prefix+"3")
			eps := endpointsOf(bs...)
			ip := fmt.Sprintf("127.201.78.%d", 30+i)
			vip := ip + ":18221"
			ap := netip.MustParseAddrPort(vip)
			seed := distinctSeed(tt.mode, ap, eps)
			clk := newFakeClock()
			l := newLab(t, Config{Mode: tt.mode, Seed: seed}, withClock(clk))
			ref := newPicker(tt.mode, seed, ap)
			l.api.ApplyService(affinityService("pricing", ip, 1, labtest.ServicePort("grpc", 18221)))
			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready), endpoint(bs[1], labtest.Ready), endpoint(bs[2], labtest.Ready))
			l.waitEndpoints(vip, bs...)
			l.waitRule(vip, func(r *Rule) bool { return r != nil && r.Affinity == time.Second })
			client := prefix + "101"

			held, err := dial(vip, client)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			x := ref.pick(eps).Pod
			if got := held.mustAsk(t, "held"); got != x {
				t.Fatalf("first connection went to %s, want %s", got, x)
			}

			clk.Advance(5 * time.Second)
			want := x
			if !tt.held {
				want = ref.pick(eps).Pod
			}
			if got := l.visit(vip, client); got != want {
				t.Fatalf("reconnect 5 s later with a connection open went to %s, want %s (first on %s)", got, want, x)
			}
			if !tt.held {
				return
			}

			// The template's timer fired with a connection open: re-armed,
			// and its timeout is now 60 s, which the reconnect restarted.
			addr := held.LocalAddr()
			held.Close()
			l.waitClosed(addr)
			clk.Advance(59 * time.Second)
			if got := l.visit(vip, client); got != x {
				t.Fatalf("reconnect 59 s after the 60 s restart went to %s, want %s", got, x)
			}
			clk.Advance(60*time.Second + time.Millisecond)
			want = ref.pick(eps).Pod
			if got := l.visit(vip, client); got != want {
				t.Fatalf("reconnect 60 s after the last, nothing open, went to %s, want the new pick %s", got, want)
			}
		})
	}
}

// TestAffinityConcurrentClients: many clients reconnecting at once each keep
// one pod; in ipvs mode only the first connection of each client reaches
// the rr scheduler, so 8 clients spread exactly 2 per pod.
func TestAffinityConcurrentClients(t *testing.T) {
	for i, mode := range []Mode{ModeIPTables, ModeIPVS} {
		t.Run(string(mode), func(t *testing.T) {
			l := newLab(t, Config{Mode: mode})
			prefix := fmt.Sprintf("127.202.4%d.", 5+i)
			bs := startBackends(t, prefix+"1", prefix+"2", prefix+"3", prefix+"4")
			ip := fmt.Sprintf("127.201.78.%d", 40+i)
			vip := ip + ":18231"
			l.api.ApplyService(affinityService("pricing", ip, 10800, labtest.ServicePort("grpc", 18231)))
			var eps []discovery.Endpoint
			for _, b := range bs {
				eps = append(eps, endpoint(b, labtest.Ready))
			}
			l.slice("pricing-a", "pricing", grpcPorts(bs), eps...)
			l.waitEndpoints(vip, bs...)

			const clients, conns = 8, 25
			pods := make([]map[string]int, clients)
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for w := range clients {
				pods[w] = map[string]int{}
				wg.Go(func() {
					for range conns {
						name, err := onceFrom(vip, fmt.Sprintf("%s%d", prefix, 101+w))
						if err != nil {
							errs <- err
							return
						}
						pods[w][name]++
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			perPod := map[string]int{}
			for w, m := range pods {
				if len(m) != 1 {
					t.Errorf("client %d reached pods %v, want one", w, m)
				}
				for name := range m {
					perPod[name]++
				}
			}
			if mode == ModeIPVS {
				want := map[string]int{"pod-1": 2, "pod-2": 2, "pod-3": 2, "pod-4": 2}
				if diff := cmp.Diff(want, perPod); diff != "" {
					t.Errorf("clients per pod (-want +got):\n%s", diff)
				}
			}
		})
	}
}
