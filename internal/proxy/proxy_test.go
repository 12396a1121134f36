package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The VIPs of this file live in 127.201.77.0/24, one port per test.

func grpcPorts(b []*backend) []discovery.EndpointPort {
	return []discovery.EndpointPort{labtest.SlicePort("grpc", b[0].addr.Port())}
}

// TestDistribution: 2000 connections over 4 ready endpoints, split across two
// EndpointSlices, land uniformly (iptables statistic, nftables numgen). The
// seed is fixed, so the counts are too, whichever worker opens which
// connection: a VIP draws its picks from one stream in accept order.
func TestDistribution(t *testing.T) {
	tests := []struct {
		mode Mode
		ip   string
		seed uint64
	}{
		{ModeIPTables, "127.201.77.1", 20261129},
		{ModeNFTables, "127.201.77.14", 20261130},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			l := newLab(t, Config{Mode: tt.mode, Seed: tt.seed})
			bs := startBackends(t, "127.202.0.1", "127.202.0.2", "127.202.0.3", "127.202.0.4")
			vip := tt.ip + ":18001"
			l.service("pricing", tt.ip, labtest.ServicePort("grpc", 18001))
			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready), endpoint(bs[1], labtest.Ready))
			l.slice("pricing-b", "pricing", grpcPorts(bs), endpoint(bs[2], labtest.Ready), endpoint(bs[3], labtest.Ready))
			l.waitEndpoints(vip, bs...)
			counts := connectMany(t, vip, 2000, 8)

			// Chi-square with 3 degrees of freedom; P(X > 30.66) = 1e-6 under
			// a uniform pick, while a skew of 10% on one endpoint gives X of
			// about 20x (each count is binomial(2000, 1/4): mean 500, sigma
			// 19.4).
			const expected = 2000.0 / 4
			var chi2 float64
			for _, b := range bs {
				d := float64(counts[b.name]) - expected
				chi2 += d * d / expected
			}
			t.Logf("counts %v, chi-square %.2f", counts, chi2)
			if len(counts) != 4 || chi2 > 30.66 {
				t.Errorf("connections per endpoint %v: chi-square %.2f > 30.66 (p < 1e-6 for a uniform pick)", counts, chi2)
			}
		})
	}
}

// connectMany opens conns connections to vip, one round trip each, from
// workers concurrent clients with their own source IPs, and counts them per
// backend.
func connectMany(t *testing.T, vip string, conns, workers int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		source := fmt.Sprintf("127.202.200.%d", w+1)
		wg.Go(func() {
			for i := 0; i < conns/workers; i++ {
				name, err := onceFrom(vip, source)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				counts[name]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("connection through %s: %v", vip, err)
	}
	return counts
}

// TestConnectionPinnedToOneBackend: the backend is picked once per
// connection; every request on it reaches that pod, while separate
// connections spread over the pods.
func TestConnectionPinnedToOneBackend(t *testing.T) {
	l := newLab(t, Config{Seed: 1})
	bs := startBackends(t, "127.202.0.11", "127.202.0.12", "127.202.0.13")
	const vip = "127.201.77.2:18002"
	l.service("pricing", "127.201.77.2", labtest.ServicePort("grpc", 18002))
	l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready), endpoint(bs[1], labtest.Ready), endpoint(bs[2], labtest.Ready))
	l.waitEndpoints(vip, bs...)

	seen := map[string]bool{}
	for i := 0; i < 30; i++ {
		c := mustDial(t, vip)
		first := c.mustAsk(t, "req-0")
		for j := 1; j < 50; j++ {
			if got := c.mustAsk(t, fmt.Sprintf("req-%d", j)); got != first {
				t.Fatalf("connection %d: request %d went to %s, earlier ones to %s", i, j, got, first)
			}
		}
		seen[first] = true
		c.Close()
	}
	if len(seen) < 2 {
		t.Errorf("30 connections all went to %v; want a new pick per connection", seen)
	}
}

// TestConntrackSurvivesEndpointChange: an established connection keeps its
// pod (TCP conntrack entries are never flushed) while new connections only
// use the remaining eligible endpoints.
func TestConntrackSurvivesEndpointChange(t *testing.T) {
	tests := []struct {
		name string
		port uint16
		// after returns the slice's endpoints once a is pinned.
		after         func(a, b *backend) []discovery.Endpoint
		wantRemaining bool // b is eligible afterwards
	}{
		{"endpoint turns not ready", 18011, func(a, b *backend) []discovery.Endpoint {
			return []discovery.Endpoint{endpoint(a, labtest.NotReady), endpoint(b, labtest.Ready)}
		}, true},
		{"endpoint removed from the slice", 18012, func(a, b *backend) []discovery.Endpoint {
			return []discovery.Endpoint{endpoint(b, labtest.Ready)}
		}, true},
		{"last endpoint turns not ready", 18013, func(a, b *backend) []discovery.Endpoint {
			return []discovery.Endpoint{endpoint(a, labtest.NotReady)}
		}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLab(t, Config{MinSyncPeriod: -1})
			bs := startBackends(t, fmt.Sprintf("127.202.1.%d", 2*i+1), fmt.Sprintf("127.202.1.%d", 2*i+2))
			a, b := bs[0], bs[1]
			vip := fmt.Sprintf("127.201.77.3:%d", tt.port)
			l.service("pricing", "127.201.77.3", labtest.ServicePort("grpc", int32(tt.port)))
			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(a, labtest.Ready))
			l.waitEndpoints(vip, a)

			c := mustDial(t, vip)
			if got := c.mustAsk(t, "before"); got != a.name {
				t.Fatalf("first connection went to %s, want %s", got, a.name)
			}

			l.slice("pricing-a", "pricing", grpcPorts(bs), tt.after(a, b)...)
			if tt.wantRemaining {
				l.waitEndpoints(vip, b)
			} else {
				l.waitEndpoints(vip)
			}

			if got := c.mustAsk(t, "after"); got != a.name {
				t.Errorf("established connection now answered by %s, want %s", got, a.name)
			}
			want := []Conn{{
				Client: addrPort(c.LocalAddr()), VIP: netip.MustParseAddrPort(vip),
				Service: types.NamespacedName{Namespace: ns, Name: "pricing"}, PortName: "grpc",
				Endpoint: a.addr, Pod: a.name,
			}}
			if diff := cmp.Diff(want, l.p.Conntrack(), ignoreOpened, netipEqual); diff != "" {
				t.Errorf("Conntrack() (-want +got):\n%s", diff)
			}

			for j := 0; j < 20; j++ {
				name, err := once(vip)
				switch {
				case tt.wantRemaining && (err != nil || name != b.name):
					t.Fatalf("new connection %d: %q, %v; want %s", j, name, err, b.name)
				case !tt.wantRemaining && !errors.Is(err, syscall.ECONNREFUSED):
					t.Fatalf("new connection %d: %q, %v; want ECONNREFUSED", j, name, err)
				}
			}

			c.CloseWrite()
			if line, err := c.r.ReadString('\n'); err != nil || line != a.name+" bye\n" {
				t.Errorf("after half-close read %q, %v; want %q", line, err, a.name+" bye\n")
			}
			if got := l.waitClosed(c.LocalAddr()); got.Pod != a.name {
				t.Errorf("closed conn pod %s, want %s", got.Pod, a.name)
			}
			for _, open := range l.p.Conntrack() {
				if open.Client == addrPort(c.LocalAddr()) {
					t.Errorf("Conntrack() still holds %+v after both directions closed", open)
				}
			}
		})
	}
}

var netipEqual = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
}

var ignoreOpened = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Opened" }, cmp.Ignore())

// TestRefusedWithoutEligibleEndpoints: REJECT, i.e. connection refused, while
// no endpoint is eligible; connects succeed once one turns ready.
func TestRefusedWithoutEligibleEndpoints(t *testing.T) {
	tests := []struct {
		name  string
		port  uint16
		slice bool
		cond  discovery.EndpointConditions
	}{
		{"no EndpointSlice", 18021, false, discovery.EndpointConditions{}},
		{"endpoint not ready", 18022, true, labtest.NotReady},
		{"endpoint terminating, not serving", 18023, true, labtest.Terminating},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLab(t, Config{MinSyncPeriod: -1})
			bs := startBackends(t, fmt.Sprintf("127.202.2.%d", i+1))
			vip := fmt.Sprintf("127.201.77.4:%d", tt.port)
			l.service("pricing", "127.201.77.4", labtest.ServicePort("grpc", int32(tt.port)))
			if tt.slice {
				l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], tt.cond))
			}
			l.waitRule(vip, func(r *Rule) bool { return r != nil && !r.Listening && len(r.Endpoints) == 0 })
			if _, err := dial(vip, ""); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial with no eligible endpoints: %v, want ECONNREFUSED", err)
			}

			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
			l.waitListening(vip)
			if name, err := once(vip); err != nil || name != bs[0].name {
				t.Fatalf("after endpoint ready: %q, %v; want %s", name, err, bs[0].name)
			}

			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.NotReady))
			l.waitEndpoints(vip)
			if _, err := dial(vip, ""); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial after endpoint not ready again: %v, want ECONNREFUSED", err)
			}
		})
	}
}

// TestTerminatingFallback: with no ready endpoint, serving terminating ones
// take new connections; not-serving terminating ones never do.
func TestTerminatingFallback(t *testing.T) {
	l := newLab(t, Config{MinSyncPeriod: -1})
	bs := startBackends(t, "127.202.3.1", "127.202.3.2", "127.202.3.3", "127.202.3.4")
	draining, gone, notReady, fresh := bs[0], bs[1], bs[2], bs[3]
	const vip = "127.201.77.5:18031"
	l.service("pricing", "127.201.77.5", labtest.ServicePort("grpc", 18031))
	l.slice("pricing-a", "pricing", grpcPorts(bs),
		endpoint(draining, labtest.ServingTerminating), endpoint(gone, labtest.Terminating), endpoint(notReady, labtest.NotReady))
	l.waitEndpoints(vip, draining)
	for i := 0; i < 30; i++ {
		if name, err := once(vip); err != nil || name != draining.name {
			t.Fatalf("connection %d: %q, %v; want %s", i, name, err, draining.name)
		}
	}

	l.slice("pricing-a", "pricing", grpcPorts(bs),
		endpoint(draining, labtest.ServingTerminating), endpoint(gone, labtest.Terminating), endpoint(fresh, labtest.Ready))
	l.waitEndpoints(vip, fresh)
	for i := 0; i < 30; i++ {
		if name, err := once(vip); err != nil || name != fresh.name {
			t.Fatalf("with a ready endpoint, connection %d: %q, %v; want %s", i, name, err, fresh.name)
		}
	}
}

// TestNoListener: kube-proxy programs nothing for headless and ExternalName
// Services, UDP ports, Services claimed by another proxy, or (the lab's
// network rule) ClusterIPs outside 127.0.0.0/8.
func TestNoListener(t *testing.T) {
	l := newLab(t, Config{})
	bs := startBackends(t, "127.202.4.1")
	l.service("headless", "None", labtest.ServicePort("grpc", 18041))
	l.slice("headless-a", "headless", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
	l.service("outside", "10.96.0.10", labtest.ServicePort("grpc", 18041))
	l.slice("outside-a", "outside", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
	l.service("udp", "127.201.77.6", v1.ServicePort{Name: "dns", Port: 18042, Protocol: v1.ProtocolUDP})
	l.slice("udp-a", "udp", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
	ext := externalName("ext")
	l.api.ApplyService(ext)
	// Events are handled in order, so once the last Service is programmed
	// the ones before it have been considered.
	l.service("sentinel", "127.201.77.7", labtest.ServicePort("grpc", 18043))
	l.slice("sentinel-a", "sentinel", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
	l.waitListening("127.201.77.7:18043")

	var got []string
	for _, r := range l.p.Rules() {
		got = append(got, r.Service.Name+" "+r.VIP.String())
	}
	if diff := cmp.Diff([]string{"sentinel 127.201.77.7:18043"}, got); diff != "" {
		t.Errorf("Rules() (-want +got):\n%s", diff)
	}
	if _, err := dial("127.201.77.6:18042", ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial UDP-only Service's ClusterIP over TCP: %v, want ECONNREFUSED", err)
	}
}

// TestNamedTargetPort: a Service port reaches the endpoint port with the same
// name, whatever its number; each Service port gets its own VIP listener.
func TestNamedTargetPort(t *testing.T) {
	l := newLab(t, Config{})
	grpcB := startBackends(t, "127.202.5.1")[0]
	metricsB := startBackends(t, "127.202.5.1")[0]
	metricsB.name = "metrics"
	if grpcB.addr.Port() == metricsB.addr.Port() {
		t.Fatal("backends share a port")
	}
	l.service("pricing", "127.201.77.8", labtest.ServicePort("grpc", 8471), labtest.ServicePort("metrics", 18051))
	ports := []discovery.EndpointPort{labtest.SlicePort("metrics", metricsB.addr.Port()), labtest.SlicePort("grpc", grpcB.addr.Port())}
	l.slice("pricing-a", "pricing", ports, endpoint(grpcB, labtest.Ready))
	l.waitListening("127.201.77.8:8471")
	l.waitListening("127.201.77.8:18051")

	tests := []struct {
		name, vip, want string
	}{
		{"grpc", "127.201.77.8:8471", "pod-1"},
		{"metrics", "127.201.77.8:18051", "metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if name, err := once(tt.vip); err != nil || name != tt.want {
				t.Errorf("via %s: %q, %v; want %s", tt.vip, name, err, tt.want)
			}
		})
	}
}

// TestServiceUpdates: ports added or removed and Service deletion open and
// close VIP listeners.
func TestServiceUpdates(t *testing.T) {
	l := newLab(t, Config{MinSyncPeriod: -1})
	bs := startBackends(t, "127.202.6.1")
	ports := []discovery.EndpointPort{labtest.SlicePort("a", bs[0].addr.Port()), labtest.SlicePort("b", bs[0].addr.Port())}
	l.slice("pricing-a", "pricing", ports, endpoint(bs[0], labtest.Ready))
	l.service("pricing", "127.201.77.9", labtest.ServicePort("a", 18061))
	l.waitListening("127.201.77.9:18061")

	l.service("pricing", "127.201.77.9", labtest.ServicePort("a", 18061), labtest.ServicePort("b", 18062))
	l.waitListening("127.201.77.9:18062")
	if _, err := once("127.201.77.9:18062"); err != nil {
		t.Fatalf("added port: %v", err)
	}

	l.service("pricing", "127.201.77.9", labtest.ServicePort("b", 18062))
	l.waitRule("127.201.77.9:18061", func(r *Rule) bool { return r == nil })
	if _, err := dial("127.201.77.9:18061", ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("removed port: %v, want ECONNREFUSED", err)
	}

	l.api.DeleteService(ns, "pricing")
	l.waitRule("127.201.77.9:18062", func(r *Rule) bool { return r == nil })
	if _, err := dial("127.201.77.9:18062", ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("deleted Service: %v, want ECONNREFUSED", err)
	}
}

// TestClientSourceIP: DNAT without SNAT, so the pod sees the client's IP.
func TestClientSourceIP(t *testing.T) {
	l := newLab(t, Config{})
	bs := startBackends(t, "127.202.7.1")
	const vip = "127.201.77.10:18071"
	l.service("pricing", "127.201.77.10", labtest.ServicePort("grpc", 18071))
	l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
	l.waitListening(vip)

	c, err := dial(vip, "127.202.9.9")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.mustAsk(t, "hello")
	if diff := cmp.Diff([]netip.Addr{netip.MustParseAddr("127.202.9.9")}, bs[0].remoteIPs(), netipEqual); diff != "" {
		t.Errorf("source IPs seen by the pod (-want +got):\n%s", diff)
	}
}

// TestDialFailureResetsClient: no retry on another endpoint; the client gets
// a reset when the chosen pod refuses.
func TestDialFailureResetsClient(t *testing.T) {
	l := newLab(t, Config{})
	bs := startBackends(t, "127.202.8.1")
	dead := &backend{name: "dead", addr: netip.AddrPortFrom(netip.MustParseAddr("127.202.8.2"), bs[0].addr.Port())}
	const vip = "127.201.77.11:18081"
	l.service("pricing", "127.201.77.11", labtest.ServicePort("grpc", 18081))
	l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(dead, labtest.Ready))
	l.waitListening(vip)

	// The RST may arrive before connect(2) reports success, or after.
	c, err := dial(vip, "")
	if err == nil {
		defer c.Close()
		_, err = c.ask("hello")
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("connection via a dead endpoint: %v, want ECONNRESET", err)
	}
}

// TestOnConnAndShutdown: the hook reports open and close, and Run's end
// closes relayed connections and listeners.
func TestOnConnAndShutdown(t *testing.T) {
	l := newLab(t, Config{})
	bs := startBackends(t, "127.202.8.11")
	const vip = "127.201.77.12:18091"
	l.service("pricing", "127.201.77.12", labtest.ServicePort("grpc", 18091))
	l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
	l.waitListening(vip)

	c := mustDial(t, vip)
	c.mustAsk(t, "hello")
	var ev connEvent
	select {
	case ev = <-l.events:
	case <-time.After(deadline):
		t.Fatal("no ConnOpened event")
	}
	if ev.e != ConnOpened || ev.c.Client != addrPort(c.LocalAddr()) || ev.c.Pod != bs[0].name {
		t.Errorf("first event %v %+v, want opened for %v to %s", ev.e, ev.c, c.LocalAddr(), bs[0].name)
	}

	if err := l.stop(); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	if _, err := c.r.ReadString('\n'); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Run ended: %v, want EOF or reset", err)
	}
	if got := l.p.Conntrack(); len(got) != 0 {
		t.Errorf("Conntrack() after Run = %+v, want empty", got)
	}
	if _, err := dial(vip, ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after Run ended: %v, want ECONNREFUSED", err)
	}
	if err := l.p.WaitListening(l.ctx(), vip); !errors.Is(err, ErrStopped) {
		t.Errorf("WaitListening after Run = %v, want ErrStopped", err)
	}
	if err := l.p.Run(l.ctx()); err == nil {
		t.Error("second Run() = nil, want error")
	}
}

func externalName(name string) *v1.Service {
	svc := &v1.Service{}
	svc.Name, svc.Namespace = name, ns
	svc.Spec.Type = v1.ServiceTypeExternalName
	svc.Spec.ExternalName = "db.example.com"
	return svc
}
