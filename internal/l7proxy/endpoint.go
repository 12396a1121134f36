package l7proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/endpoints"
)

// endpoint is one pod address in the routing table, with its own pool of
// HTTP/2 connections and the load figures the policies read. An endpoint
// leaves the table once (retire) and never comes back; an address that
// returns gets a new endpoint. A retired endpoint's connections are closed
// as soon as it has no active request.
type endpoint struct {
	addr netip.AddrPort
	host string // addr.String(), for dialling
	pod  string

	active  atomic.Int64 // picked and not finished (Envoy rq_active)
	pending atomic.Int64 // picked and no response data yet (Linkerd pending)
	rtt     rttEstimate
	retired atomic.Bool

	mu    sync.Mutex // guards conns
	conns []*upConn
}

// newEndpoint returns e's endpoint.
func (p *Proxy) newEndpoint(e endpoints.Endpoint) *endpoint {
	ep := &endpoint{addr: e.Addr, host: e.Addr.String(), pod: e.Pod}
	ep.rtt.rtt = float64(p.ewma.DefaultRTT)
	ep.rtt.at = p.now()
	return ep
}

// conn returns a connection to ep that can take a new stream, dialling one
// if none can (several streams may each dial one at start-up).
func (ep *endpoint) conn(p *Proxy) (*upConn, error) {
	ep.mu.Lock()
	for _, c := range ep.conns {
		if c.usable() {
			ep.mu.Unlock()
			return c, nil
		}
	}
	ep.mu.Unlock()
	c, err := p.dialUp(ep)
	if err != nil {
		return nil, err
	}
	ep.mu.Lock()
	ep.conns = append(ep.conns, c)
	ep.mu.Unlock()
	return c, nil
}

func (ep *endpoint) removeConn(c *upConn) {
	ep.mu.Lock()
	ep.conns = slices.DeleteFunc(ep.conns, func(x *upConn) bool { return x == c })
	ep.mu.Unlock()
}

// closeConns closes ep's connections; their readers clean up.
func (ep *endpoint) closeConns() {
	ep.mu.Lock()
	cs := slices.Clone(ep.conns)
	ep.mu.Unlock()
	for _, c := range cs {
		c.nc.Close()
	}
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
		ep.closeConns()
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
		ep.closeConns()
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

// connSet holds the open upstream connections and starts their readers,
// so Close can end every one.
type connSet struct {
	mu     sync.Mutex
	closed bool
	m      map[*upConn]struct{}
}

// add records c and starts serve in a goroutine owned by the Proxy; false
// once closeAll ran.
func (s *connSet) add(c *upConn, serve func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[*upConn]struct{}{}
	}
	s.m[c] = struct{}{}
	c.p.wg.Go(serve)
	return true
}

func (s *connSet) remove(c *upConn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// closeAll closes every connection and refuses new ones.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	cs := make([]*upConn, 0, len(s.m))
	for c := range s.m {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.nc.Close()
	}
}
