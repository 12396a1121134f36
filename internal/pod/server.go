// Package pod is the workload that runs inside every lab pod: a real grpc-go
// server for pricing.v1.Pricing plus the standard grpc.health.v1 and
// grpc.channelz.v1 services, with grpc-go's MaxConnectionAge settings taken
// from the pod's args, and, on a metrics port, the Prometheus metrics of the
// grpc-ecosystem go-grpc-middleware provider, as production services
// report. Each
// reply names the pod (name and IP) that served it. A Server behaves as the
// pod's process: Stop is SIGTERM (graceful, with an optional drain delay),
// Kill is SIGKILL (connections reset), Hang stalls it, and a start-up delay
// keeps it from listening at first. Blackhole makes an address drop SYNs.
//
// A WebServer is the same workload over HTTP/1.1 and WebSocket (the wire
// contract is package webapi), run beside the gRPC server by a pod with an
// HTTP port. It shows that a ClusterIP Service balances connections, not
// requests, whatever the protocol: an HTTP/1.1 client's keep-alive pool
// reaches several pods, a WebSocket pins to one as a gRPC channel does.
package pod

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/workload"
	"google.golang.org/grpc"
	channelzsvc "google.golang.org/grpc/channelz/service"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
)

// Observer receives what a pod serves, for per-pod reports. Calls come from
// grpc-go's transport goroutines, concurrently; implementations must be safe
// for concurrent use and quick.
type Observer interface {
	// Served reports one finished call of method from peer.
	Served(peer netip.AddrPort, method string, code codes.Code)
	// Conn reports a connection from peer opening (open true) or closing.
	Conn(peer netip.AddrPort, open bool)
}

// Config describes one pod's server.
type Config struct {
	// Name and Namespace identify the pod in replies.
	Name, Namespace string
	// Addr is the pod IP and port to listen on; it must be inside a range
	// package loopback allows (127.0.0.0/8, or a private namespace's),
	// unless Netns is a ContainerNetns (any address; 0.0.0.0 for every
	// one of the pod's).
	Addr netip.AddrPort
	// MaxConnectionAge and MaxConnectionAgeGrace are passed to grpc-go's
	// keepalive.ServerParameters; zero means infinity, as in grpc-go. They
	// must pass workload.CheckConnectionAge (Start refuses them otherwise).
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// StartupDelay is how long after Start the server begins to listen
	// (pod arg --startup-delay); connects are refused until then. Zero
	// listens in Start.
	StartupDelay time.Duration
	// DrainDelay is how long Stop keeps serving normally, with health
	// NOT_SERVING and the listener open, before grpc-go's GracefulStop
	// (pod arg --drain-delay). Zero starts the graceful stop at once.
	DrainDelay time.Duration
	// ServiceTime is how long each GetPrice call works before it answers
	// (a call whose deadline comes first ends with DEADLINE_EXCEEDED);
	// zero answers at once.
	ServiceTime time.Duration
	// FailPercent is the share of GetPrice calls, 0 to 100, failed with
	// INTERNAL after the service time (workload.Args.FailPercent): each
	// call independently, drawn from a source seeded by Name.
	FailPercent int
	// ORCA reports the pod's load (gRFC A51) per call and out of band
	// (workload.Args.ORCA; see loadMeter).
	ORCA bool
	// NoChannelz leaves grpc.channelz.v1 out of this server: a channelz
	// call to it is Unimplemented, as to most production servers.
	NoChannelz bool
	// Observer, if not nil, is told about calls and connections.
	Observer Observer
	// MetricsAddr, if valid, is where the pod serves its Prometheus metrics
	// over HTTP (GET /metrics; pod arg --metrics-port): the server metrics
	// of this pod only, of the family Metrics names. It must be inside a
	// range package loopback allows. The zero value serves no metrics (the
	// calls are still counted).
	MetricsAddr netip.AddrPort
	// Metrics is the metrics' family (pod arg --metrics): MetricsGoGRPC
	// (empty means it) or MetricsOTel; another is Start's error.
	Metrics string
	// Netns, if not nil, is the pod's own network namespace: the server
	// (and its metrics) listen there. Nil listens in the node's; a
	// ContainerNetns in the process's own, that of a real cluster's
	// container.
	Netns Netns
}

// ErrHardStop is returned by Stop when the server did not drain in time:
// its context ended (the grace period) or Kill was called, and the
// remaining connections were closed with their calls failing.
var ErrHardStop = errors.New("pod: grace period over, connections closed")

// ErrNotServing is returned by Hang before the server listens and after it
// stopped.
var ErrNotServing = errors.New("pod: server is not serving")

// Server is one running pod workload, a process in the lab's terms. Start
// it once; Stop (SIGTERM) and Kill (SIGKILL) may be called concurrently and
// more than once. All methods are safe for concurrent use.
type Server struct {
	cfg    Config
	grpc   *grpc.Server
	health *health.Server
	gate   *gate

	quit     chan struct{} // closed by Stop or Kill: no more listening
	killed   chan struct{} // closed by Kill
	done     chan struct{} // closed once the server stopped for good
	quitOnce sync.Once
	killOnce sync.Once
	doneOnce sync.Once
	wg       sync.WaitGroup

	metrics *metrics

	mu         sync.Mutex
	err        error // why the server exited on its own
	hung       bool
	metricsSrv *metricsServer // nil until listen, and without MetricsAddr
	metricsErr error          // cfg.Metrics names no family
	finished   bool           // finish ran: a metrics server started later is closed at once

	unhealthy atomic.Bool // SetHealthy(false): NOT_SERVING, calls fail
}

// New returns a server for cfg; nothing listens until Start. Besides
// pricing.v1.Pricing it registers grpc.health.v1 and, unless
// cfg.NoChannelz, grpc.channelz.v1 (the
// latter turns on grpc-go's channelz for the whole process: every server,
// channel and socket of the process is listed, as in any grpc-go binary
// that serves channelz; a client tells this pod's server by its listen
// socket's address).
func New(cfg Config) *Server {
	m, merr := newMetrics(cfg.Metrics)
	if merr != nil {
		m, _ = newMetrics(MetricsGoGRPC) // Start reports merr
	}
	opts := append([]grpc.ServerOption{
		grpc.StatsHandler(statsHandler(cfg.Observer)),
	}, m.serverOptions()...)
	var meter *loadMeter
	if cfg.ORCA {
		meter = newLoadMeter(time.Now)
		opts = append(opts, orca.CallMetricsServerOption(nil))
	}
	if cfg.MaxConnectionAge > 0 || cfg.MaxConnectionAgeGrace > 0 {
		kp := keepalive.ServerParameters{
			MaxConnectionAge:      cfg.MaxConnectionAge,
			MaxConnectionAgeGrace: cfg.MaxConnectionAgeGrace,
		}
		opts = append(opts, grpc.KeepaliveParams(kp))
	}
	s := &Server{
		cfg: cfg, grpc: grpc.NewServer(opts...), health: health.NewServer(), gate: newGate(cfg.Netns), metrics: m,
		quit: make(chan struct{}), killed: make(chan struct{}), done: make(chan struct{}),
	}
	s.gate.addr = cfg.Addr
	pricingv1.RegisterPricingServer(s.grpc, &pricing{cfg: cfg, unhealthy: &s.unhealthy, meter: meter, fail: newFailer(cfg.Name, cfg.FailPercent)})
	if meter != nil {
		// Out of band: to clients that ask (weighted_round_robin with
		// enableOobLoadReport), at their interval but at most every 30 s:
		// grpc-go's orca service takes no shorter minimum.
		_ = orca.Register(s.grpc, orca.ServiceOptions{ServerMetricsProvider: meter})
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus(pricingv1.Pricing_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ReadinessService, healthpb.HealthCheckResponse_SERVING)
	if !cfg.NoChannelz {
		channelzsvc.RegisterChannelzServiceToServer(s.grpc)
	}
	m.initialize(s.grpc)
	s.metricsErr = merr
	return s
}

// Start listens on cfg.Addr and serves in a background goroutine owned by s.
// Without a StartupDelay it returns once the listener is bound and returns
// the bind error, if any; with one it returns at once, and a failure to
// listen after the delay ends the server (Done closes, Err says why), as a
// process that exits during its start-up.
func (s *Server) Start(ctx context.Context) error {
	if s.metricsErr != nil {
		return fmt.Errorf("pod %s: %w", s.cfg.Name, s.metricsErr)
	}
	if err := workload.CheckConnectionAge(s.cfg.MaxConnectionAge, s.cfg.MaxConnectionAgeGrace); err != nil {
		return fmt.Errorf("pod %s: %w", s.cfg.Name, err)
	}
	if s.cfg.StartupDelay <= 0 {
		return s.listen(ctx)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(s.cfg.StartupDelay)
		defer t.Stop()
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		if err := s.listen(context.Background()); err != nil && !errors.Is(err, net.ErrClosed) {
			go s.exit(err) // Kill waits for this goroutine
		}
	}()
	return nil
}

func (s *Server) listen(ctx context.Context) error {
	if err := s.gate.listen(ctx, s.cfg.Addr); err != nil {
		return fmt.Errorf("pod %s: %w", s.cfg.Name, err)
	}
	if err := s.serveMetrics(ctx); err != nil {
		s.gate.Close()
		return fmt.Errorf("pod %s: %w", s.cfg.Name, err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(s.gate); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			go s.exit(err) // Kill waits for this goroutine
		}
	}()
	return nil
}

// exit ends a server that failed on its own, as a crashing process. It runs
// on a goroutine of its own, since Kill waits for the server's goroutines.
func (s *Server) exit(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = fmt.Errorf("pod %s: %w", s.cfg.Name, err)
	}
	s.mu.Unlock()
	s.Kill()
}

// Addr returns the address the server listens on (cfg.Addr until it is
// bound; with port 0, the kernel's choice after that).
func (s *Server) Addr() net.Addr { return s.gate.Addr() }

// Done is closed once the server has stopped for good: Stop or Kill
// returned, or it exited on its own (Err says why).
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns why the server exited on its own, or nil.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Stop shuts down as a pod does on SIGTERM: health turns NOT_SERVING; after
// cfg.DrainDelay (still serving, listener open) grpc-go's GracefulStop closes
// the listener, sends GOAWAY on every connection and lets in-flight calls
// finish. When ctx ends first (the termination grace period) or Kill is
// called, remaining connections are closed hard and their calls fail; Stop
// then returns ErrHardStop. A hung server ignores SIGTERM: Stop waits for ctx
// or Kill. Stop before the server listens just cancels the listening. Stop
// blocks until the server has stopped.
func (s *Server) Stop(ctx context.Context) error {
	s.quitOnce.Do(func() { close(s.quit) })
	defer s.finish()
	if s.isHung() {
		return s.hardAfter(ctx.Done())
	}
	s.health.Shutdown()
	if d := s.cfg.DrainDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return s.hardAfter(nil)
		case <-s.killed:
			return s.hardAfter(nil)
		}
	}
	graceful := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(graceful)
	}()
	select {
	case <-graceful:
		s.wg.Wait()
		return nil
	case <-ctx.Done():
	case <-s.killed:
	}
	s.hardAfter(nil)
	<-graceful
	return ErrHardStop
}

// hardAfter waits for wait (nil: not at all) or Kill, then stops hard:
// every connection closes, as a killed process's sockets do, which also
// ends a hang's hold on them (gate.closeAll), and grpc-go stops.
func (s *Server) hardAfter(wait <-chan struct{}) error {
	if wait != nil {
		select {
		case <-wait:
		case <-s.killed:
		}
	}
	s.gate.closeAll(false)
	s.grpc.Stop()
	s.wg.Wait()
	return ErrHardStop
}

// serveMetrics starts the metrics server, if the pod has a metrics
// address, unless the server already finished.
func (s *Server) serveMetrics(ctx context.Context) error {
	if !s.cfg.MetricsAddr.IsValid() {
		return nil
	}
	ms, err := startMetrics(ctx, s.cfg.Netns, s.cfg.MetricsAddr, s.metrics.reg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		ms.Close()
		return nil
	}
	s.metricsSrv = ms
	return nil
}

// finish closes the metrics server, then done, once.
func (s *Server) finish() {
	s.doneOnce.Do(func() {
		s.mu.Lock()
		s.finished = true
		ms := s.metricsSrv
		s.mu.Unlock()
		ms.Close()
		close(s.done)
	})
}

// Kill stops at once, as SIGKILL: the listener closes and every connection
// is reset (RST, no GOAWAY), so in-flight calls fail with UNAVAILABLE. It
// blocks until the server has stopped.
func (s *Server) Kill() {
	s.quitOnce.Do(func() { close(s.quit) })
	// Reset before a Stop waiting for Kill wakes: its hard stop closes
	// with FIN what is still open.
	s.gate.reset()
	s.killOnce.Do(func() { close(s.killed) })
	s.grpc.Stop()
	s.wg.Wait()
	s.finish()
}

// Hang makes the server hang (true) or recover (false), as a process stuck
// in a deadlock: new connects time out (its address is a Blackhole while
// hung), and calls on open connections stall, their requests and replies
// held back, until the calls' deadlines. Health checks fail the same way.
// It returns ErrNotServing before the server listens or after it stopped,
// and an error if the address cannot be blackholed or bound again.
func (s *Server) Hang(ctx context.Context, hang bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.gate.hang(ctx, hang); err != nil {
		return err
	}
	s.hung = hang
	return nil
}

func (s *Server) isHung() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hung
}

// ReadinessService is a grpc.health.v1 service name every pod serves,
// SERVING until SetReady(false): a kubelet readiness probe that asks for
// it (grpc: {port: 8471, service: pinlab.readiness}) follows SetReady, as
// a liveness probe without a service does not. The lab's kubelet makes
// pods unready by itself; a real cluster's kubelet needs this.
const ReadinessService = "pinlab.readiness"

// SetReady(false) turns ReadinessService NOT_SERVING, so a readiness probe
// asking for it fails while the server goes on serving calls; true turns
// it back. A stopping server stays NOT_SERVING.
func (s *Server) SetReady(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus(ReadinessService, st)
}

// SetHealthy(false) makes the server unhealthy, as an application whose
// dependency is down: its grpc.health.v1 status for pricing.v1.Pricing turns
// NOT_SERVING (the overall "" status, which a kubelet gRPC probe without a
// service asks for, stays SERVING) and every Pricing call fails with
// UNAVAILABLE. SetHealthy(true) undoes it. A stopping server stays
// NOT_SERVING.
func (s *Server) SetHealthy(ok bool) {
	s.unhealthy.Store(!ok)
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus(pricingv1.Pricing_ServiceDesc.ServiceName, st)
}

type pricing struct {
	pricingv1.UnimplementedPricingServer
	cfg       Config
	unhealthy *atomic.Bool
	meter     *loadMeter // nil without cfg.ORCA
	fail      *failer
}

// errFailed is what a pod answers to the calls FailPercent fails.
var errFailed = status.Error(codes.Internal, "pod failed the call (--fail-percent)")

// failer draws which calls a pod fails: each call independently with
// probability percent/100 (0: none, 100: all), from a random source seeded
// by the pod's name, so that a run's seed (which names the pods) repeats
// it. Independent draws, not every n-th call: clients whose calls
// interleave in step would otherwise see all or none of the failures.
// Safe for concurrent use.
type failer struct {
	percent int
	mu      sync.Mutex
	rng     *rand.Rand
}

func newFailer(name string, percent int) *failer {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &failer{percent: percent, rng: rand.New(rand.NewPCG(h.Sum64(), 0x9e3779b97f4a7c15))}
}

// fails draws one call.
func (f *failer) fails() bool {
	switch {
	case f.percent <= 0:
		return false
	case f.percent >= 100:
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(100) < f.percent
}

// errUnhealthy is what an unhealthy pod answers.
var errUnhealthy = status.Error(codes.Unavailable, "pod unhealthy: a dependency is down")

func (p *pricing) GetPrice(ctx context.Context, req *pricingv1.GetPriceRequest) (*pricingv1.GetPriceResponse, error) {
	if p.unhealthy.Load() {
		return nil, errUnhealthy
	}
	began := time.Now()
	if d := p.cfg.ServiceTime; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
	failed := p.fail.fails()
	if p.meter != nil {
		p.meter.served(began, failed)
		if r := orca.CallMetricsRecorderFromContext(ctx); r != nil {
			qps, eps, util := p.meter.load()
			r.SetQPS(qps)
			r.SetEPS(eps)
			r.SetApplicationUtilization(util)
		}
	}
	if failed {
		return nil, errFailed
	}
	return p.quote(req.GetSku(), 0), nil
}

func (p *pricing) WatchPrices(req *pricingv1.WatchPricesRequest, stream grpc.ServerStreamingServer[pricingv1.GetPriceResponse]) error {
	if p.unhealthy.Load() {
		return errUnhealthy
	}
	interval := time.Duration(req.GetIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for seq := int64(1); req.GetCount() == 0 || seq <= req.GetCount(); seq++ {
		if err := stream.Send(p.quote(req.GetSku(), seq)); err != nil {
			return err
		}
		if req.GetCount() != 0 && seq == req.GetCount() {
			break
		}
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-t.C:
		}
	}
	return nil
}

func (p *pricing) quote(sku string, seq int64) *pricingv1.GetPriceResponse {
	return &pricingv1.GetPriceResponse{
		Sku:        sku,
		PriceCents: priceCents(sku),
		Pod:        p.cfg.Name,
		PodIp:      p.cfg.Addr.Addr().String(),
		Namespace:  p.cfg.Namespace,
		Seq:        seq,
	}
}

// priceCents is the pod's pricing, the same over gRPC, HTTP and WebSocket:
// 100 + fnv32a(sku) mod 99900.
func priceCents(sku string) int64 {
	h := fnv.New32a()
	h.Write([]byte(sku))
	return 100 + int64(h.Sum32()%99900)
}

// MetricsAddr returns the address the metrics server listens on, or nil
// before it listens and for a pod without one (with port 0 in
// Config.MetricsAddr, the kernel's choice).
func (s *Server) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metricsSrv == nil {
		return nil
	}
	return s.metricsSrv.addr
}
