package l7proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
)

// upstreamIdleTimeout closes an upstream connection that carried no request
// for this long: Envoy's default HTTP idle_timeout for upstream connections.
const upstreamIdleTimeout = time.Hour

// endpoint is one pod address in the routing table, with its own HTTP/2
// connection pool (an http.Transport) and the load figures the policies
// read. An endpoint leaves the table once (retire) and never comes back; an
// address that returns gets a new endpoint. A retired endpoint's connections
// are closed as soon as it has no active request.
type endpoint struct {
	addr netip.AddrPort
	host string // addr.String(), the URL host of attempts
	pod  string
	tr   *http.Transport

	active  atomic.Int64 // picked and not finished (Envoy rq_active)
	pending atomic.Int64 // picked and no response data yet (Linkerd pending)
	rtt     rttEstimate
	retired atomic.Bool
}

// newEndpoint returns t's endpoint, dialling through p.
func (p *Proxy) newEndpoint(t target) *endpoint {
	ep := &endpoint{addr: t.addr, host: t.addr.String(), pod: t.pod}
	ep.rtt.rtt = float64(p.ewma.DefaultRTT)
	ep.rtt.at = p.now()
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	ep.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.dial(ctx, ep)
		},
		Protocols:          protos,
		DisableCompression: true, // headers pass unchanged; gRPC compresses per message
		IdleConnTimeout:    upstreamIdleTimeout,
	}
	return ep
}

// cost is the endpoint's peak-EWMA load at now: the decayed estimate times
// (pending+1), tower's PeakEwma::load.
func (ep *endpoint) cost(now time.Duration, decay float64) float64 {
	return ep.rtt.update(0, now, decay) * float64(ep.pending.Load()+1)
}

// acquire counts a new request on ep; false if ep was retired meanwhile
// (the caller picks again from the current table).
func (p *Proxy) acquire(ep *endpoint) bool {
	ep.active.Add(1)
	if ep.retired.Load() {
		p.release(ep)
		return false
	}
	ep.pending.Add(1)
	return true
}

// release ends a request counted by acquire.
func (p *Proxy) release(ep *endpoint) {
	if ep.active.Add(-1) == 0 && ep.retired.Load() {
		p.conns.closeEndpoint(ep)
	}
}

// firstData ends ep's pending state for a request that started at start,
// adding a peak-EWMA sample when sample is true.
func (p *Proxy) firstData(ep *endpoint, start time.Duration, sample bool) {
	ep.pending.Add(-1)
	if sample {
		now := p.now()
		ep.rtt.update(float64(now-start), now, float64(p.ewma.Decay))
	}
}

// retire takes ep out of service: new requests cannot acquire it, and its
// connections close once its last request ends.
func (p *Proxy) retire(ep *endpoint) {
	ep.retired.Store(true)
	if ep.active.Load() == 0 {
		p.conns.closeEndpoint(ep)
	}
}

// dialError is a failed connect to an endpoint: nothing was sent, so the
// request may go to another endpoint.
type dialError struct {
	addr netip.AddrPort
	err  error
}

func (e *dialError) Error() string { return fmt.Sprintf("connect to %s: %v", e.addr, e.err) }
func (e *dialError) Unwrap() error { return e.err }

var errProxyClosed = errors.New("l7proxy: closed")

// dial opens a connection to ep from the configured source address.
func (p *Proxy) dial(ctx context.Context, ep *endpoint) (net.Conn, error) {
	c, err := p.dialer.DialContext(ctx, ep.host)
	if err != nil {
		return nil, &dialError{ep.addr, err}
	}
	tc := &trackedConn{Conn: c, p: p, ep: ep, info: Conn{
		Local: loopback.AddrPort(c.LocalAddr()), Remote: ep.addr, Pod: ep.pod, Upstream: true,
	}}
	if !p.conns.add(tc) {
		c.Close()
		return nil, &dialError{ep.addr, errProxyClosed}
	}
	if p.obs != nil {
		p.obs.Conn(tc.info, true)
	}
	return tc, nil
}

// trackedConn is an upstream connection known to the Proxy, so Close can
// end every one and the Observer hears of each.
type trackedConn struct {
	net.Conn
	p    *Proxy
	ep   *endpoint
	info Conn
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.conns.remove(c)
		if c.p.obs != nil {
			c.p.obs.Conn(c.info, false)
		}
	})
	return err
}

// connSet holds the open upstream connections.
type connSet struct {
	mu     sync.Mutex
	closed bool
	m      map[*trackedConn]struct{}
}

// add records c; false once closeAll ran.
func (s *connSet) add(c *trackedConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[*trackedConn]struct{}{}
	}
	s.m[c] = struct{}{}
	return true
}

func (s *connSet) remove(c *trackedConn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// closeEndpoint closes ep's connections.
func (s *connSet) closeEndpoint(ep *endpoint) {
	s.closeWhere(func(c *trackedConn) bool { return c.ep == ep })
}

// closeAll closes every connection and refuses new ones.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeWhere(func(*trackedConn) bool { return true })
}

func (s *connSet) closeWhere(match func(*trackedConn) bool) {
	s.mu.Lock()
	var cs []*trackedConn
	for c := range s.m {
		if match(c) {
			cs = append(cs, c)
		}
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}
