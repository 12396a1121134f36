package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
)

// Client defaults and limits.
const (
	// DefaultHTTPPath is what HTTPClient requests unless HTTPConfig.Path says
	// otherwise.
	DefaultHTTPPath = "/v1/price?sku=sku-1"
	// MaxWebRate is the highest Rate a client accepts, per client.
	MaxWebRate = 100000
	// maxBody bounds how much of a reply body a client reads.
	maxBody = 64 << 10
	// idleConnTimeout is http.DefaultTransport's: an idle keep-alive
	// connection closes after 90 s.
	idleConnTimeout = 90 * time.Second
)

// HTTPConfig configures an HTTPClient. Name, Source, URL and Rate are
// required; every other zero value works.
type HTTPConfig struct {
	// Name identifies the client (e.g. "order-0").
	Name string
	// Source is the IP the client dials from, like a client pod's IP;
	// inside 127.0.0.0/8.
	Source netip.Addr
	// URL is the base "http://host:port"; host is an IP in 127.0.0.0/8
	// (a pod IP or a ClusterIP VIP) or, with DNS set, a name.
	URL string
	// DNS is the DNS server ("IP:port" in 127.0.0.0/8, e.g.
	// "127.96.0.10:53") that resolves a host name in URL, again for every
	// new connection (see the package doc). Empty: URL's host must be an IP.
	DNS string
	// Path is the request path and query; default DefaultHTTPPath.
	Path string
	// Rate is the offered load in requests per second, open-loop; must be
	// > 0 and at most MaxWebRate.
	Rate float64
	// Timeout is each request's deadline, counted from when it was due,
	// and the connect timeout; default 1s.
	Timeout time.Duration
	// MaxIdleConnsPerHost is how many idle keep-alive connections the pool
	// keeps; a connection finishing a request while that many are idle is
	// closed. Zero means net/http's default, 2 (http.DefaultMaxIdleConnsPerHost).
	// The pool opens a connection whenever a request finds none idle, so
	// with more requests in flight than this it keeps closing and dialling
	// connections (each through the VIP, or resolved, anew). A request
	// takes the most recently used idle connection (net/http's
	// Transport.queueForIdleConn), so at under one request in flight the
	// pool rarely grows past one connection.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost bounds the connections open at once (dialling,
	// active and idle); requests beyond it wait for one. Zero means no
	// limit, as in net/http.
	MaxConnsPerHost int
	// DisableKeepAlives makes every request use a new connection.
	DisableKeepAlives bool
	// MaxInFlight bounds outstanding requests; a request due while that
	// many are open is not sent and counts as RESOURCE_EXHAUSTED. Default
	// 1000.
	MaxInFlight int
	// Scheduler, if not nil, paces the client's calls (shared by the
	// clients of a run: more precise than a timer per client, see
	// Scheduler); its Run must be running. Nil paces with a timer.
	Scheduler *Scheduler
	// Phase delays the client's first call (and so its whole schedule) from
	// the start of Run, so that clients started together are not in step:
	// give each a different one within 1/Rate. Default 0.
	Phase time.Duration
	// Observer receives every request's result (Pod from the reply's JSON;
	// Code from webapi.CodeOf for a status, or DeadlineExceeded, Canceled or
	// Unavailable for a failure without one) and every TCP connection
	// (remote is the address dialled: the VIP or pod IP). Methods are
	// called concurrently. Nil discards.
	Observer Observer
}

// HTTPClient is an open-loop HTTP/1.1 load generator over a net/http
// keep-alive pool. Its lifecycle is that of every client in this package:
// NewHTTPClient does no I/O (the pool dials on the first request); Run(ctx)
// sends until ctx ends, then closes the client; Close waits for everything
// the client started (requests in flight and old pools' drains). Run it
// once; Close it if it never runs.
type HTTPClient struct {
	cfg    HTTPConfig
	target target
	dial   *dialer

	wg       sync.WaitGroup // request goroutines and pool drains
	inflight atomic.Int64

	mu     sync.Mutex // guards pool and closed
	pool   *pool      // the pool new requests use
	closed bool
}

// pool is one http.Transport and the requests in flight on it.
type pool struct {
	tr     *http.Transport
	client *http.Client
	calls  sync.WaitGroup
}

// NewHTTPClient validates cfg and builds the client's pool; nothing is
// dialled until the first request.
func NewHTTPClient(cfg HTTPConfig) (*HTTPClient, error) {
	fail := func(err error) (*HTTPClient, error) {
		return nil, fmt.Errorf("load: http client %s: %w", cfg.Name, err)
	}
	if err := checkRate(cfg.Rate); err != nil {
		return fail(err)
	}
	if cfg.MaxIdleConnsPerHost < 0 || cfg.MaxConnsPerHost < 0 {
		return fail(fmt.Errorf("MaxIdleConnsPerHost %d, MaxConnsPerHost %d: want >= 0", cfg.MaxIdleConnsPerHost, cfg.MaxConnsPerHost))
	}
	if cfg.Path == "" {
		cfg.Path = DefaultHTTPPath
	}
	if cfg.Path[0] != '/' {
		return fail(fmt.Errorf("path %q: want it to start with /", cfg.Path))
	}
	t, d, err := webDefaults(cfg.URL, cfg.DNS, cfg.Source, &cfg.Timeout, &cfg.MaxInFlight, &cfg.Observer)
	if err != nil {
		return fail(err)
	}
	c := &HTTPClient{cfg: cfg, target: t, dial: d}
	c.pool = c.newPool()
	return c, nil
}

// webDefaults applies the defaults the HTTP and WebSocket clients share
// (timeout 1s, maxInFlight 1000, a nil observer discards) and returns the
// parsed target and the client's dialer.
func webDefaults(url, dns string, source netip.Addr, timeout *time.Duration, maxInFlight *int, obs *Observer) (target, *dialer, error) {
	*timeout = orDefault(*timeout, time.Second)
	if *maxInFlight <= 0 {
		*maxInFlight = 1000
	}
	if *obs == nil {
		*obs = discard{}
	}
	t, err := parseTarget(url, dns)
	if err != nil {
		return target{}, nil, err
	}
	d, err := newDialer(source, dns, *timeout, *obs)
	return t, d, err
}

func checkRate(rate float64) error {
	if !(rate > 0) || rate > MaxWebRate || math.IsInf(rate, 0) {
		return fmt.Errorf("rate %v/s: want > 0 and <= %d", rate, MaxWebRate)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// newTransport returns an HTTP/1.1-only transport dialling through d, with
// no proxy from the environment.
func newTransport(d *dialer, idle, maxConns int, noKeepAlive bool) *http.Transport {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Transport{
		DialContext:         d.DialContext,
		Protocols:           &protocols,
		MaxIdleConnsPerHost: idle,
		MaxConnsPerHost:     maxConns,
		DisableKeepAlives:   noKeepAlive,
		IdleConnTimeout:     idleConnTimeout,
	}
}

func (c *HTTPClient) newPool() *pool {
	tr := newTransport(c.dial, c.cfg.MaxIdleConnsPerHost, c.cfg.MaxConnsPerHost, c.cfg.DisableKeepAlives)
	return &pool{tr: tr, client: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Restart replaces the client's pool, as a restarted client process would:
// new requests use a fresh transport (new connections, each resolving
// again); the old pool's connections close once its requests in flight
// finish.
func (c *HTTPClient) Restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("load: http client stopped")
	}
	// Requests join a pool under c.mu, so all of old's have joined before
	// the drain starts waiting.
	old := c.pool
	c.pool = c.newPool()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		old.calls.Wait()
		old.tr.CloseIdleConnections()
	}()
	return nil
}

// Run sends requests on the open-loop schedule until ctx ends, then waits
// for those in flight (each bounded by Timeout) and closes the pool's
// connections, as Close does. It returns nil.
func (c *HTTPClient) Run(ctx context.Context) error {
	defer c.Close()
	pacing{rate: fixedRate(c.cfg.Rate), phase: c.cfg.Phase, launch: c.launch, sent: lagHook(c.cfg.Observer)}.run(ctx, c.cfg.Scheduler)
	return nil
}

func (c *HTTPClient) launch(due time.Time) {
	if c.inflight.Load() >= int64(c.cfg.MaxInFlight) {
		c.cfg.Observer.Called(Result{Due: due, Latency: time.Since(due), Code: codes.ResourceExhausted, Cause: plan.CauseNotSent})
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	p := c.pool
	p.calls.Add(1)
	c.wg.Add(1)
	c.mu.Unlock()
	c.inflight.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.inflight.Add(-1)
		defer p.calls.Done()
		c.cfg.Observer.Called(c.call(p, due))
	}()
}

// call sends one request and reads its reply.
func (c *HTTPClient) call(p *pool, due time.Time) Result {
	ctx, cancel := context.WithDeadline(context.Background(), due.Add(c.cfg.Timeout))
	defer cancel()
	r := Result{Due: due}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.target.base+c.cfg.Path, nil)
	if err != nil {
		r.Code = codes.Internal
		return r
	}
	resp, err := p.client.Do(req)
	if err != nil {
		r.Latency, r.Code = time.Since(due), errCode(err)
		return r
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	r.Latency, r.Code = time.Since(due), webapi.CodeOf(resp.StatusCode)
	switch {
	case err != nil:
		r.Code = errCode(err)
	case r.Code == codes.OK:
		var q webapi.Quote
		if json.Unmarshal(body, &q) != nil {
			r.Code = codes.Internal
			break
		}
		r.Pod, r.PodIP = q.Pod, q.PodIP
	}
	return r
}

// Close stops the client: no new requests start, those in flight finish
// (each bounded by Timeout), and the pool's connections close. Safe to call
// more than once and concurrently with Run.
func (c *HTTPClient) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	p := c.pool
	c.mu.Unlock()
	c.wg.Wait()
	p.tr.CloseIdleConnections()
}
