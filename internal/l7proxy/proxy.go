// Package l7proxy is a per-request (L7) gRPC proxy, as a service-mesh
// sidecar (Linkerd's proxy, Istio's Envoy) or a gateway runs one. A client
// keeps its one HTTP/2 connection to the proxy, and the proxy picks a pod for
// every request (every gRPC call), so added pods get calls as soon as their
// EndpointSlice shows them ready: the fix to connection pinning that needs no
// client change.
//
// Both sides speak HTTP/2 cleartext with prior knowledge (h2c, as grpc-go
// does without TLS). Like Envoy, the proxy relays at the HTTP/2 codec level:
// golang.org/x/net/http2's Framer and HPACK read and write the frames, one
// goroutine per connection reads and acts on them, header blocks are
// re-encoded for the other side, DATA is copied within each peer's
// flow-control windows, and frames written while handling one read are sent
// in one write. There is no goroutine per call. Each endpoint has its own
// pool of connections, dialled from Config.Source. (A first version on
// net/http's server and Transport under httputil.ReverseProxy cost 2-3
// times the CPU of a direct call per proxied call and managed 0.27 of direct
// throughput; see BenchmarkDirectVsProxy.)
//
// Routing follows a Service port through its EndpointSlices (a client-go
// informer): ready endpoints, else serving and terminating ones, as
// kube-proxy's CategorizeEndpoints. Policies are Envoy's round_robin and
// least_request and Linkerd's peak-EWMA balancer; see [RoundRobin],
// [LeastRequest] and [PeakEWMA].
//
// Failures, as Envoy with retries on connect-failure and refused-stream, and
// Linkerd, behave:
//   - A request whose connect was refused goes to another endpoint; one the
//     pod did not process (REFUSED_STREAM, or beyond the last stream of its
//     GOAWAY) is sent again, on another connection, while its headers and
//     body are at hand (Config.ReplayLimit). Nothing that may have reached
//     a pod's handler is sent twice.
//   - A request that gets no response is answered with a Trailers-Only
//     UNAVAILABLE: "no healthy upstream" when no endpoint is eligible (Envoy's
//     words), else the upstream error.
//   - A pod that resets a stream or loses its connection after the response
//     started makes the proxy end the response with UNAVAILABLE trailers.
//   - Headers, trailers, statuses, messages, details and custom metadata
//     from pods pass through unchanged, as header blocks.
package l7proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/pinlab/pinlab/internal/endpoints"
	"github.com/pinlab/pinlab/internal/loopback"
)

// Config configures a Proxy. Listen, Namespace and Service are required;
// every other field's zero value works.
type Config struct {
	// Listen is where clients connect; it must be inside 127.0.0.0/8. Port 0
	// picks a free port (see Proxy.Addr).
	Listen netip.AddrPort
	// Source is the IP the proxy dials pods from: a sidecar uses its client
	// pod's IP, a gateway its own pod IP. It must be inside 127.0.0.0/8; the
	// zero Addr lets the kernel choose (127.0.0.1).
	Source netip.Addr
	// Namespace and Service name the Service routed to.
	Namespace, Service string
	// Port is the Service port: its name, as EndpointSlice ports carry it,
	// or its decimal number, mapped to the name through the Service object
	// (which is then watched too). Empty means the unnamed port of a
	// single-port Service.
	Port string
	// Policy is one of plan.ProxyPolicies; empty means RoundRobin, Envoy's
	// default.
	Policy string
	// EWMA tunes PeakEWMA; zero fields take Linkerd's values.
	EWMA EWMA
	// DialTimeout bounds a connect to a pod; zero means 1s.
	DialTimeout time.Duration
	// MaxAttempts bounds the attempts of one request: connects refused
	// (another endpoint each time) and streams a pod refused unprocessed
	// (another endpoint if there is one); zero means 3.
	MaxAttempts int
	// ReplayLimit is how many request body bytes are kept, until the
	// response starts, so that a request the pod refused can be sent again
	// (Envoy's retry buffer); a longer body cannot be resent. Zero means
	// 64 KiB.
	ReplayLimit int
	// MaxConcurrentStreams is the HTTP/2 limit on calls in flight per client
	// connection (SETTINGS_MAX_CONCURRENT_STREAMS); zero means 1000. grpc-go
	// clients queue calls beyond it.
	MaxConcurrentStreams int
	// DrainTimeout bounds how long Close lets calls in flight finish; zero
	// means 5s.
	DrainTimeout time.Duration
	// Observer, if not nil, hears of every call and connection.
	Observer Observer
	// Logger receives warnings (skipped endpoints, unknown ports). Nil
	// discards.
	Logger *slog.Logger
}

// Defaults of the Config fields whose zero value means a default.
const (
	DefaultDialTimeout          = time.Second
	DefaultMaxAttempts          = 3
	DefaultReplayLimit          = 64 << 10
	DefaultMaxConcurrentStreams = 1000
	DefaultDrainTimeout         = 5 * time.Second
)

// Endpoint is one entry of the routing table.
type Endpoint struct {
	Addr netip.AddrPort
	Pod  string
	// Active counts requests picked for it and not finished.
	Active int
}

// Proxy is one running L7 proxy. Create it with New, start the informer
// factory, call Start once, and Close (or Shutdown) once. Its methods are
// safe for concurrent use.
type Proxy struct {
	cfg    Config
	ewma   EWMA
	bal    balancer
	obs    Observer
	log    *slog.Logger
	dialer loopback.Dialer
	epoch  time.Time

	slices   discoverylisters.EndpointSliceLister
	services corelisters.ServiceLister // nil when Port is a name
	portNum  int32
	regs     []registration

	mu     sync.Mutex // serializes syncs; guards eps and warned
	eps    map[netip.AddrPort]*endpoint
	warned map[string]bool
	table  atomic.Pointer[table]

	ups   connSet
	downs downSet
	wg    sync.WaitGroup // accept loop, connection readers, retries

	ln      net.Listener
	started atomic.Bool
	stopped atomic.Bool
}

// table is the immutable routing table; syncs replace it whole.
type table struct{ eps []*endpoint }

type registration struct {
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
}

// New returns a Proxy for cfg fed by factory's discovery/v1 EndpointSlices
// informer (and its Services informer when cfg.Port is a number), on which it
// registers event handlers: call it before factory.Start. It returns an error
// for an invalid cfg.
func New(factory informers.SharedInformerFactory, cfg Config) (*Proxy, error) {
	if factory == nil {
		return nil, errors.New("l7proxy: nil informer factory")
	}
	cfg, err := validate(cfg)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:    cfg,
		ewma:   cfg.EWMA.withDefaults(),
		obs:    cfg.Observer,
		log:    cfg.Logger,
		dialer: loopback.Dialer{Source: cfg.Source, Timeout: cfg.DialTimeout},
		epoch:  time.Now(),
		eps:    map[netip.AddrPort]*endpoint{},
		warned: map[string]bool{},
	}
	if p.bal, err = newBalancer(cfg.Policy, p.ewma); err != nil {
		return nil, err
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("component", "l7proxy", "service", cfg.Namespace+"/"+cfg.Service)
	p.table.Store(&table{})

	p.slices = factory.Discovery().V1().EndpointSlices().Lister()
	err = p.watch(factory.Discovery().V1().EndpointSlices().Informer(), p.isMySlice)
	if n, perr := strconv.ParseUint(cfg.Port, 10, 16); perr == nil {
		p.portNum = int32(n)
		p.services = factory.Core().V1().Services().Lister()
		err = errors.Join(err, p.watch(factory.Core().V1().Services().Informer(), p.isMyService))
	}
	if err != nil {
		p.removeHandlers()
		return nil, err
	}
	return p, nil
}

// validate checks cfg and fills in defaults.
func validate(cfg Config) (Config, error) {
	var errs []error
	if !cfg.Listen.IsValid() {
		errs = append(errs, errors.New("Listen is required"))
	} else if err := loopback.CheckIP(cfg.Listen.Addr()); err != nil {
		errs = append(errs, fmt.Errorf("Listen: %w", err))
	}
	if cfg.Source.IsValid() {
		if err := loopback.CheckIP(cfg.Source); err != nil {
			errs = append(errs, fmt.Errorf("Source: %w", err))
		}
	}
	if cfg.Namespace == "" || cfg.Service == "" {
		errs = append(errs, errors.New("Namespace and Service are required"))
	}
	if n, err := strconv.ParseUint(cfg.Port, 10, 64); err == nil && (n == 0 || n > 65535) {
		errs = append(errs, fmt.Errorf("Port %s is not a port number (1-65535)", cfg.Port))
	}
	if cfg.Policy == "" {
		cfg.Policy = RoundRobin
	}
	for name, v := range map[string]int64{
		"DialTimeout": int64(cfg.DialTimeout), "MaxAttempts": int64(cfg.MaxAttempts),
		"ReplayLimit": int64(cfg.ReplayLimit), "MaxConcurrentStreams": int64(cfg.MaxConcurrentStreams),
		"DrainTimeout": int64(cfg.DrainTimeout), "EWMA.DefaultRTT": int64(cfg.EWMA.DefaultRTT),
		"EWMA.Decay": int64(cfg.EWMA.Decay),
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s is negative", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("l7proxy: invalid config: %w", err)
	}
	cfg.DialTimeout = orDefault(cfg.DialTimeout, DefaultDialTimeout)
	cfg.MaxAttempts = orDefault(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.ReplayLimit = orDefault(cfg.ReplayLimit, DefaultReplayLimit)
	cfg.MaxConcurrentStreams = orDefault(cfg.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	cfg.DrainTimeout = orDefault(cfg.DrainTimeout, DefaultDrainTimeout)
	return cfg, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Start waits until the informers have synced (the factory must be started
// before or meanwhile), then listens on Config.Listen and serves in
// goroutines owned by p. ctx bounds the start only. After a failed Start,
// Close still releases the informer handlers.
func (p *Proxy) Start(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("l7proxy: Start called more than once")
	}
	synced := make([]cache.InformerSynced, len(p.regs))
	for i, r := range p.regs {
		synced[i] = r.reg.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("l7proxy: informers not synced: %w", context.Cause(ctx))
	}
	p.sync()
	ln, err := loopback.Listen(ctx, p.cfg.Listen.String())
	if err != nil {
		return fmt.Errorf("l7proxy: %w", err)
	}
	p.ln = ln
	p.wg.Go(p.accept)
	return nil
}

// accept serves every client connection in its own reader goroutine until
// the listener closes; other accept errors (such as running out of file
// descriptors) are retried after a pause, as net/http's server does.
func (p *Proxy) accept() {
	for {
		nc, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			p.log.Warn("accept failed; retrying", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		d := p.newDownConn(nc)
		if !p.downs.add(d, d.serve) {
			nc.Close()
			continue
		}
		if p.obs != nil {
			p.obs.Conn(d.info, true)
		}
	}
}

// Addr returns the address the proxy listens on, once Start succeeded.
func (p *Proxy) Addr() netip.AddrPort {
	if p.ln == nil {
		return netip.AddrPort{}
	}
	return loopback.AddrPort(p.ln.Addr())
}

// Endpoints returns the current routing table, sorted by address.
func (p *Proxy) Endpoints() []Endpoint {
	eps := p.table.Load().eps
	out := make([]Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = Endpoint{Addr: ep.addr, Pod: ep.pod, Active: int(ep.active.Load())}
	}
	return out
}

// Shutdown stops the proxy gracefully, as Envoy's drain does: the listener
// closes, every client connection gets GOAWAY, and calls in flight may
// finish. When ctx ends first, remaining connections close and their calls
// fail; Shutdown then returns ctx's error. Either way it returns after every
// goroutine the proxy started has ended and every upstream connection is
// closed. Later calls do nothing.
func (p *Proxy) Shutdown(ctx context.Context) error {
	if !p.stopped.CompareAndSwap(false, true) {
		return nil
	}
	if p.ln != nil {
		p.ln.Close()
	}
	err := p.downs.drain(ctx)
	if err != nil {
		err = fmt.Errorf("l7proxy: drain cut short: %w", err)
	}
	p.removeHandlers()
	p.ups.closeAll()
	p.wg.Wait()
	return err
}

// Close is Shutdown bounded by Config.DrainTimeout.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DrainTimeout)
	defer cancel()
	return p.Shutdown(ctx)
}

func (p *Proxy) now() time.Duration { return time.Since(p.epoch) }

// watch registers sync on inf for the objects mine accepts.
func (p *Proxy) watch(inf cache.SharedIndexInformer, mine func(any) bool) error {
	reg, err := inf.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: mine,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { p.sync() },
			UpdateFunc: func(any, any) { p.sync() },
			DeleteFunc: func(any) { p.sync() },
		},
	})
	if err != nil {
		return fmt.Errorf("l7proxy: registering event handler: %w", err)
	}
	p.regs = append(p.regs, registration{inf, reg})
	return nil
}

func (p *Proxy) removeHandlers() {
	for _, r := range p.regs {
		r.informer.RemoveEventHandler(r.reg)
	}
	p.regs = nil
}

func (p *Proxy) isMySlice(obj any) bool {
	m, ok := meta(obj)
	return ok && m.GetNamespace() == p.cfg.Namespace && m.GetLabels()[discovery.LabelServiceName] == p.cfg.Service
}

func (p *Proxy) isMyService(obj any) bool {
	m, ok := meta(obj)
	return ok && m.GetNamespace() == p.cfg.Namespace && m.GetName() == p.cfg.Service
}

// meta unwraps deletion tombstones.
func meta(obj any) (interface {
	GetNamespace() string
	GetName() string
	GetLabels() map[string]string
}, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(interface {
		GetNamespace() string
		GetName() string
		GetLabels() map[string]string
	})
	return m, ok
}

// sync rebuilds the routing table from the listers and publishes it at once,
// so a pod is used from the moment its slice shows it ready. Endpoints that
// stay keep their connections and load figures; those that leave are
// retired.
func (p *Proxy) sync() {
	p.mu.Lock()
	defer p.mu.Unlock()
	es := p.eligible()
	next := make(map[netip.AddrPort]*endpoint, len(es))
	eps := make([]*endpoint, 0, len(es))
	for _, e := range es {
		ep := p.eps[e.Addr]
		if ep == nil || ep.pod != e.Pod {
			ep = p.newEndpoint(e)
		}
		next[e.Addr] = ep
		eps = append(eps, ep)
	}
	p.table.Store(&table{eps: eps})
	for addr, ep := range p.eps {
		if next[addr] != ep {
			p.retire(ep)
		}
	}
	p.eps = next
}

// eligible reads the routed port's eligible endpoints from the listers.
// Slices labelled headless count: unlike kube-proxy, a mesh proxy routes
// to a headless Service's pods.
func (p *Proxy) eligible() []endpoints.Endpoint {
	name, ok := p.portName()
	if !ok {
		return nil
	}
	sel := labels.SelectorFromSet(labels.Set{discovery.LabelServiceName: p.cfg.Service})
	ss, err := p.slices.EndpointSlices(p.cfg.Namespace).List(sel)
	if err != nil {
		return nil
	}
	eps, outside := endpoints.Filter{Port: name, Headless: true}.Endpoints(ss)
	for _, a := range outside {
		p.warnOnce("outside/"+a.String(), "endpoint skipped: outside the lab network", "endpoint", a)
	}
	return endpoints.Eligible(eps)
}

// portName is the slice port name of the routed port; false when Port is a
// number and the Service is missing or has no such TCP port.
func (p *Proxy) portName() (string, bool) {
	if p.services == nil {
		return p.cfg.Port, true
	}
	svc, err := p.services.Services(p.cfg.Namespace).Get(p.cfg.Service)
	if err != nil {
		return "", false
	}
	name, ok := endpoints.ServicePortName(svc, p.portNum)
	if !ok {
		p.warnOnce("port/"+p.cfg.Port, "Service has no TCP port with this number; nothing to route to", "port", p.portNum)
	}
	return name, ok
}

func (p *Proxy) warnOnce(id, msg string, args ...any) {
	if !p.warned[id] {
		p.warned[id] = true
		p.log.Warn(msg, args...)
	}
}

// downSet holds the client connections and starts their readers.
type downSet struct {
	mu      sync.Mutex
	closed  bool
	m       map[*downConn]struct{}
	changed chan struct{} // closed and replaced when a connection leaves
}

// add records d and starts serve in a goroutine owned by the Proxy; false
// once draining began.
func (s *downSet) add(d *downConn, serve func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m, s.changed = map[*downConn]struct{}{}, make(chan struct{})
	}
	s.m[d] = struct{}{}
	d.p.wg.Go(serve)
	return true
}

func (s *downSet) remove(d *downConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, d)
	if s.changed != nil {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *downSet) list() ([]*downConn, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := make([]*downConn, 0, len(s.m))
	for d := range s.m {
		ds = append(ds, d)
	}
	return ds, s.changed
}

// drain sends GOAWAY on every connection and waits until all have closed;
// when ctx ends first it closes the rest and returns ctx's error.
func (s *downSet) drain(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	ds, _ := s.list()
	for _, d := range ds {
		d.goAway()
	}
	var err error
	for {
		ds, changed := s.list()
		if len(ds) == 0 {
			return err
		}
		if err != nil {
			<-changed
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			err = ctx.Err()
			for _, d := range ds {
				d.nc.Close()
			}
		}
	}
}
