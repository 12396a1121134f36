package l7proxy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	discovery "k8s.io/api/discovery/v1"
)

// Addresses of this package's tests: pods on 127.244.250.0/24 with
// kernel-chosen ports (one EndpointSlice per pod carries its port), clients
// and the proxy's source on 127.244.251.0/24, the proxy on 127.0.0.1.

const (
	ns       = "shop"
	svcName  = "pricing"
	deadline = 10 * time.Second
	clientIP = "127.244.251.1"
)

// lab is one Proxy over a fake API, with the pods the test starts.
type lab struct {
	t   testing.TB
	api *labtest.API
	p   *Proxy
	obs *recorder
}

// newLab starts a Proxy routing to Service shop/pricing port "grpc" (unless
// cfg says otherwise) from clientIP; cleanup closes it and its informers.
func newLab(t testing.TB, cfg Config) *lab {
	t.Helper()
	l := &lab{t: t, api: labtest.NewAPI(t), obs: &recorder{}}
	if !cfg.Listen.IsValid() {
		cfg.Listen = netip.MustParseAddrPort("127.0.0.1:0")
	}
	if !cfg.Source.IsValid() {
		cfg.Source = netip.MustParseAddr(clientIP)
	}
	if cfg.Namespace == "" {
		cfg.Namespace, cfg.Service = ns, svcName
	}
	if cfg.Port == "" {
		cfg.Port = "grpc"
	}
	if cfg.Observer == nil {
		cfg.Observer = l.obs
	}
	cfg.Logger = labtest.Logger(t)
	p, err := New(l.api.Factory, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	l.p = p
	l.api.Start()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := p.Start(l.ctx()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return l
}

// ctx returns a context that ends after the test's wait deadline.
func (l *lab) ctx() context.Context { return labtest.Context(l.t, deadline) }

// backend is a pod server the test started.
type backend struct {
	name string
	addr netip.AddrPort
	rec  podtest.Recorder // calls finished, as the pod's grpc-go server saw them
	pod  *pod.Server      // nil for a testServer
	test *testServer      // nil for a pod.Server
}

// startPod starts a pod.Server named name on addr (IP:port, port 0 for a
// free one); cleanup kills it unless the test stopped it.
func (l *lab) startPod(name, addr string) *backend {
	return l.startPodWith(pod.Config{Name: name, Addr: netip.MustParseAddrPort(addr)})
}

// startPodWith starts a pod.Server with cfg (Namespace and Observer set
// here).
func (l *lab) startPodWith(cfg pod.Config) *backend {
	l.t.Helper()
	b := &backend{name: cfg.Name}
	cfg.Namespace, cfg.Observer = ns, &b.rec
	b.pod = podtest.Start(l.t, cfg)
	b.addr = loopback.AddrPort(b.pod.Addr())
	return b
}

// pods starts n pods named pricing-0.. on 127.244.250.first... with free
// ports.
func (l *lab) pods(n, first int) []*backend {
	return l.podsOnPort(n, first, 0)
}

// podsOnPort is pods with every pod on the given port, so one EndpointSlice
// can list them all.
func (l *lab) podsOnPort(n, first, port int) []*backend {
	bs := make([]*backend, n)
	for i := range bs {
		bs[i] = l.startPod(fmt.Sprintf("pricing-%d", i), fmt.Sprintf("127.244.250.%d:%d", first+i, port))
	}
	return bs
}

// setEndpoint creates or replaces the EndpointSlice "pricing-<b.name>" that
// holds b alone with conditions c.
func (l *lab) setEndpoint(b *backend, c discovery.EndpointConditions) {
	l.t.Helper()
	l.api.ApplySlice(labtest.Slice(ns, "pricing-"+b.name, svcName,
		[]discovery.EndpointPort{labtest.SlicePort("grpc", b.addr.Port())},
		labtest.Endpoint(ns, b.name, b.addr.Addr(), c)))
}

// setSlice creates or replaces the EndpointSlice "pricing-all" listing bs,
// which must share one port, with conditions c[i] for bs[i].
func (l *lab) setSlice(bs []*backend, c ...discovery.EndpointConditions) {
	l.t.Helper()
	var eps []discovery.Endpoint
	for i, b := range bs {
		eps = append(eps, labtest.Endpoint(ns, b.name, b.addr.Addr(), c[i]))
	}
	l.api.ApplySlice(labtest.Slice(ns, "pricing-all", svcName,
		[]discovery.EndpointPort{labtest.SlicePort("grpc", bs[0].addr.Port())}, eps...))
}

// ready makes every b a ready endpoint and waits until the proxy routes to
// exactly bs.
func (l *lab) ready(bs ...*backend) {
	l.t.Helper()
	for _, b := range bs {
		l.setEndpoint(b, labtest.Ready)
	}
	l.waitTable(bs...)
}

// waitTable waits until the proxy's routing table is exactly bs.
func (l *lab) waitTable(bs ...*backend) {
	l.t.Helper()
	want := map[netip.AddrPort]bool{}
	for _, b := range bs {
		want[b.addr] = true
	}
	l.waitFor("routing table "+names(bs), func() bool {
		eps := l.p.Endpoints()
		if len(eps) != len(want) {
			return false
		}
		for _, ep := range eps {
			if !want[ep.Addr] {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond until it holds or the deadline passes.
func (l *lab) waitFor(what string, cond func() bool) {
	l.t.Helper()
	if labtest.Poll(l.ctx(), 2*time.Millisecond, cond) != nil {
		l.t.Fatalf("timed out after %v waiting for %s; table %+v", deadline, what, l.p.Endpoints())
	}
}

func names(bs []*backend) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.name)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// client returns a pricing client over one grpc-go channel to the proxy
// (pick_first, grpc-go's default), dialled from clientIP.
func (l *lab) client() pricingv1.PricingClient {
	return l.dial(l.p.Addr().String())
}

// dial returns a pricing client over one grpc-go channel to addr, dialled
// from clientIP.
func (l *lab) dial(addr string) pricingv1.PricingClient {
	return pricingv1.NewPricingClient(podtest.Dial(l.t, addr, netip.MustParseAddr(clientIP)))
}

// call makes one GetPrice call with a generous deadline.
func call(c pricingv1.PricingClient, sku string) (*pricingv1.GetPriceResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	return c.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: sku})
}

// recorder is an Observer that keeps everything.
type recorder struct {
	mu    sync.Mutex
	calls []Call
	conns []connEvent
}

type connEvent struct {
	c    Conn
	open bool
}

func (r *recorder) Call(c Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) Conn(c Conn, open bool) {
	r.mu.Lock()
	r.conns = append(r.conns, connEvent{c, open})
	r.mu.Unlock()
}

func (r *recorder) snapshot() ([]Call, []connEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...), append([]connEvent(nil), r.conns...)
}

// testServer is a pricing server with behaviours chosen by SKU, for what
// pod.Server does not do: latency, custom metadata, error statuses, and a
// call that blocks so the test can break its connection.
type testServer struct {
	pricingv1.UnimplementedPricingServer
	name    string
	delay   time.Duration
	grpc    *grpc.Server
	arrived chan string // receives the SKU of every "block" call
	mu      sync.Mutex
	skus    map[string]int // calls that reached the handler, by SKU
}

// startTestServer starts a testServer on ip with a free port.
func (l *lab) startTestServer(name, ip string, delay time.Duration) *backend {
	l.t.Helper()
	s := &testServer{name: name, delay: delay, grpc: grpc.NewServer(), arrived: make(chan string, 16), skus: map[string]int{}}
	b := &backend{name: name, test: s}
	pricingv1.RegisterPricingServer(s.grpc, s)
	ln, err := loopback.Listen(l.ctx(), ip+":0")
	if err != nil {
		l.t.Fatalf("listen: %v", err)
	}
	b.addr = loopback.AddrPort(ln.Addr())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.grpc.Serve(ln)
	}()
	l.t.Cleanup(func() {
		s.grpc.Stop()
		<-done
	})
	return b
}

func (s *testServer) count(sku string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skus[sku]
}

func (s *testServer) GetPrice(ctx context.Context, req *pricingv1.GetPriceRequest) (*pricingv1.GetPriceResponse, error) {
	s.mu.Lock()
	s.skus[req.GetSku()]++
	s.mu.Unlock()
	resp := &pricingv1.GetPriceResponse{Sku: req.GetSku(), Pod: s.name, PriceCents: 1}
	switch req.GetSku() {
	case "metadata":
		grpc.SetHeader(ctx, metadata.Pairs("x-header", "h1"))
		grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t1", "x-trailer-bin", "\x00\x01\xff"))
		return resp, nil
	case "notfound":
		grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t2"))
		return nil, status.Error(codes.NotFound, "no price for ü: 100% sure")
	case "details":
		st, err := status.New(codes.FailedPrecondition, "out of stock").WithDetails(&pricingv1.GetPriceRequest{Sku: "detail"})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	case "block":
		s.arrived <- s.name
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	return resp, nil
}
