package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
)

// serve accepts connections on ln, the listener of sp's VIP, until ln is
// closed. It is sp's only accept loop while it runs, so it owns sp.picker.
func (p *Proxier) serve(ctx context.Context, sp *servicePort, ln net.Listener) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// EMFILE and the like: back off like net/http rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("accept failed", "vip", sp.vip, "err", err, "retry", backoff)
			if !pause(ctx, backoff) {
				return
			}
			continue
		}
		backoff = 0
		p.dispatch(ctx, sp, c)
	}
}

// dispatch is the NEW-packet path: read the VIP's endpoint snapshot, pick
// once, and hand the connection to its own goroutine. A connection that
// arrives while no endpoint is eligible is reset, as REJECT answers it.
func (p *Proxier) dispatch(ctx context.Context, sp *servicePort, c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	t := sp.table.Load()
	if !ok || t == nil || len(t.eps) == 0 {
		reset(c)
		return
	}
	client := addrPort(tc.RemoteAddr())
	ep, hold := p.choose(sp, t, client.Addr())
	conn := Conn{Client: client, VIP: sp.vip, Service: t.svc, PortName: t.port, Endpoint: ep.Addr, Pod: ep.Pod}
	p.wg.Go(func() { p.forward(ctx, tc, conn, hold) })
}

// choose picks the endpoint of a new connection from client: by the
// Service's ClientIP affinity if it has one, else (and on an affinity miss)
// by the mode's picker. A non-nil releaser holds an IPVS persistence
// template until the connection ends.
func (p *Proxier) choose(sp *servicePort, t *table, client netip.Addr) (Endpoint, releaser) {
	if t.affinity == 0 {
		return sp.picker.pick(t.eps), nil
	}
	return sp.sticky.choose(client, t, p.now(), sp.picker)
}

// forward dials conn.Endpoint from the client's own IP (DNAT, no SNAT: the
// pod sees the real client address) and relays until both directions end.
// A client whose address is not this namespace's (a pod with a network
// namespace of its own, calling the ClusterIP through its default route)
// cannot be dialled from: then the relay dials from the node's address,
// as kube-proxy masquerades what it cannot return through itself.
// A failed dial resets the client: modern kube-proxy modes do not retry.
// hold, if not nil, is released when the connection is over, before the
// ConnClosed hook.
func (p *Proxier) forward(ctx context.Context, client *net.TCPConn, conn Conn, hold releaser) {
	d := loopback.Dialer{Source: conn.Client.Addr(), Timeout: p.dialTimeout}
	nc, err := d.DialContext(ctx, conn.Endpoint.String())
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		d.Source = netip.Addr{}
		nc, err = d.DialContext(ctx, conn.Endpoint.String())
	}
	if err != nil {
		p.log.Debug("dial to endpoint failed; resetting client", "vip", conn.VIP, "endpoint", conn.Endpoint, "err", err)
		reset(client)
		p.releaseHold(hold)
		return
	}
	conn.Opened = time.Now()
	r := &relay{conn: conn, client: client, pod: nc.(*net.TCPConn)}
	if !p.track.add(r) {
		reset(client)
		reset(r.pod)
		p.releaseHold(hold)
		return
	}
	p.notify(conn, ConnOpened)
	r.run()
	p.track.remove(r)
	p.releaseHold(hold)
	p.notify(conn, ConnClosed)
}

func (p *Proxier) releaseHold(hold releaser) {
	if hold != nil {
		hold.release(p.now())
	}
}

func (p *Proxier) notify(c Conn, e ConnEvent) {
	if p.onConn != nil {
		p.onConn(c, e)
	}
}

// run copies both ways until both are done, then closes both sockets.
func (r *relay) run() { Relay(r.client, r.pod) }

// Relay copies a to b and b to a until both directions are done, then
// closes both sockets: an EOF is passed on as a half-close (FIN), an error
// as a reset of both (RST), as a kernel's NAT would pass them. It is the
// relay each kube-proxy connection runs; `lab up --control-plane
// kubernetes` forwards the API server to the host with it too. It returns
// when both directions have ended; closing either socket ends it.
func Relay(a, b *net.TCPConn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(b, a)
	}()
	pipe(a, b)
	<-done
	a.Close()
	b.Close()
}

// pipe copies src to dst (io.Copy splices on Linux). On EOF it half-closes
// dst, passing the FIN on. On any error (a reset, or a write to a closed
// peer) it resets both sockets, passing the RST on as the kernel would.
func pipe(dst, src *net.TCPConn) {
	if _, err := io.Copy(dst, src); err != nil {
		reset(src)
		reset(dst)
		return
	}
	dst.CloseWrite()
}

// reset closes c with SO_LINGER 0 so the peer gets an RST, not a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// pause waits d, or returns false if ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
