package load

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/plan"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// collector records every result a client reports, counts its connections
// and their close reasons; events, if not nil, gets each connection event
// too.
type collector struct {
	mu      sync.Mutex
	results []Result
	opened  int
	closed  int
	reasons map[CloseReason]int
	events  chan ConnEvent
}

func (c *collector) Called(r Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results = append(c.results, r)
}

func (c *collector) Conn(ev ConnEvent) {
	c.mu.Lock()
	if ev.Open {
		c.opened++
	} else {
		c.closed++
		if c.reasons == nil {
			c.reasons = map[CloseReason]int{}
		}
		c.reasons[ev.Reason]++
	}
	c.mu.Unlock()
	select {
	case c.events <- ev: // a nil events blocks: the default drops it
	default: // full: tests read the first few only
	}
}

func (c *collector) snapshot() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Result(nil), c.results...)
}

func (c *collector) connections() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened
}

func (c *collector) conns() (opened, closed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened, c.closed
}

// closeReasons returns how many connections closed for each reason.
func (c *collector) closeReasons() map[CloseReason]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.reasons)
}

// tally counts results by code, pod and cause.
type tally struct {
	codes  map[codes.Code]int
	pods   map[string]int
	causes map[plan.Cause]int
	total  int
}

func count(rs []Result) tally {
	t := tally{codes: map[codes.Code]int{}, pods: map[string]int{}, causes: map[plan.Cause]int{}}
	for _, r := range rs {
		t.codes[r.Code]++
		t.total++
		if r.Code == codes.OK {
			t.pods[r.Pod]++
		} else {
			t.causes[r.Cause]++
		}
	}
	return t
}

// dueAfter returns the results of calls due at or after t.
func dueAfter(rs []Result, t time.Time) []Result {
	var out []Result
	for _, r := range rs {
		if !r.Due.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// start creates a client for cfg and runs it until the returned stop is
// called (or the test ends); stop waits for Run to return.
func start(t *testing.T, cfg Config) (*Client, func()) {
	t.Helper()
	c, err := New(cfg)
	return c, running(t, c, err)
}

// running runs c, just made with error err (which fails t), until stop is
// called or the test ends; stop waits for Run to return.
func running(t *testing.T, c interface{ Run(context.Context) error }, err error) (stop func()) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	run := labtest.Run(t, c.Run)
	return func() { run() }
}

// backend is a pricing server for tests with knobs the pod server lacks:
// a delay, a status to answer with, failing first attempts, and health
// status control.
type backend struct {
	pricingv1.UnimplementedPricingServer
	name   string
	ip     string
	addr   netip.AddrPort
	srv    *grpc.Server
	health *health.Server
	wg     sync.WaitGroup

	delay     atomic.Int64  // nanoseconds each call waits
	code      atomic.Uint32 // status to answer with; OK answers normally
	failFirst atomic.Bool   // UNAVAILABLE to attempts that are not retries
	attempts  atomic.Int64  // calls that arrived
	entered   chan struct{} // signalled as a call arrives; one pending at most
}

// startBackend serves on addr ("ip:port", port 0 for any) until the test
// ends.
func startBackend(t *testing.T, name, addr string, opts ...grpc.ServerOption) *backend {
	t.Helper()
	ln, err := loopback.Listen(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return serveBackend(t, name, ln, opts...)
}

// serveBackend serves on ln with opts until the test ends.
func serveBackend(t *testing.T, name string, ln net.Listener, opts ...grpc.ServerOption) *backend {
	t.Helper()
	b := &backend{name: name, addr: loopback.AddrPort(ln.Addr()), srv: grpc.NewServer(opts...), health: health.NewServer(), entered: make(chan struct{}, 1)}
	b.ip = b.addr.Addr().String()
	pricingv1.RegisterPricingServer(b.srv, b)
	healthpb.RegisterHealthServer(b.srv, b.health)
	b.setServing(true)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.srv.Serve(ln)
	}()
	t.Cleanup(b.stop)
	return b
}

// stop closes the listener and every connection at once (grpc.Server.Stop).
func (b *backend) stop() {
	b.srv.Stop()
	b.wg.Wait()
}

func (b *backend) setServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	b.health.SetServingStatus(pricingv1.Pricing_ServiceDesc.ServiceName, st)
}

func (b *backend) GetPrice(ctx context.Context, _ *pricingv1.GetPriceRequest) (*pricingv1.GetPriceResponse, error) {
	b.attempts.Add(1)
	select {
	case b.entered <- struct{}{}:
	default:
	}
	if b.failFirst.Load() {
		md, _ := metadata.FromIncomingContext(ctx)
		if len(md.Get("grpc-previous-rpc-attempts")) == 0 {
			return nil, status.Error(codes.Unavailable, "first attempts fail here")
		}
	}
	if c := codes.Code(b.code.Load()); c != codes.OK {
		return nil, status.Error(c, "the backend answers "+c.String())
	}
	if d := time.Duration(b.delay.Load()); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-timer.C:
		}
	}
	return &pricingv1.GetPriceResponse{Pod: b.name, PodIp: b.ip}, nil
}

// resetProxy relays TCP to a backend and can reset every client connection
// (close with SO_LINGER 0, so the client reads ECONNRESET), as a vanished
// peer or a middlebox would.
type resetProxy struct {
	ln      net.Listener
	backend string
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startResetProxy(t *testing.T, addr, backend string) *resetProxy {
	t.Helper()
	ln, err := loopback.Listen(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &resetProxy{ln: ln, backend: backend}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *resetProxy) addr() string { return p.ln.Addr().String() }

func (p *resetProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := loopback.Dialer{}.DialContext(context.Background(), p.backend)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *resetProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
}

// reset aborts every relayed connection.
func (p *resetProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	p.conns = nil
}

func (p *resetProxy) close() {
	p.ln.Close()
	p.reset()
	p.wg.Wait()
}

// blackhole is a listening socket whose accept queue is full and never
// drained: the kernel drops further SYNs, so connects hang until they time
// out, as with a host that stopped answering.
type blackhole struct {
	fd      int
	addr    netip.AddrPort
	fillers []net.Conn
}

func startBlackhole(t *testing.T, ip string) *blackhole {
	t.Helper()
	a := netip.MustParseAddr(ip)
	if err := loopback.CheckIP(a); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	bh := &blackhole{fd: fd}
	t.Cleanup(bh.close)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: a.As4()}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	bh.addr = netip.AddrPortFrom(a, uint16(sa.(*unix.SockaddrInet4).Port))
	// Fill the accept queue: connects succeed until it is full.
	for range 16 {
		c, err := loopback.Dialer{Timeout: 200 * time.Millisecond}.DialContext(context.Background(), bh.addr.String())
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return bh
		}
		if err != nil {
			t.Fatal(err)
		}
		bh.fillers = append(bh.fillers, c)
	}
	t.Fatal("blackhole: accept queue never filled")
	return nil
}

func (bh *blackhole) close() {
	for _, c := range bh.fillers {
		c.Close()
	}
	unix.Close(bh.fd)
}
