package pod

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/pinlab/pinlab/internal/loopback"
)

// gate is the listener grpc-go serves on. It can make the server hang, as a
// process stuck in a deadlock or a long GC pause: the listening socket is
// replaced by a Blackhole (new connects time out), and reads and writes on
// accepted connections stall (calls hang until their deadline) until the
// hang ends. It also tracks accepted connections so a crash can reset them.
type gate struct {
	ns     Netns          // where to listen; nil: the node's namespace
	addr   netip.AddrPort // the bound address, set by listen
	closed chan struct{}  // closed by Close
	hung   atomic.Bool    // fast path for reads and writes: false while not hung

	mu     sync.Mutex
	inner  net.Listener  // nil while hung or before listen
	hole   *Blackhole    // while hung
	resume chan struct{} // closed while not hung
	conns  map[*gateConn]struct{}
	done   bool
	shut   shutMode // set by closeAll: connections accepted later are closed at once
}

// shutMode is how a stopped gate closes connections: not at all (still
// serving), with FIN, or with RST.
type shutMode int

const (
	notShut shutMode = iota
	shutFIN
	shutRST
)

func newGate(ns Netns) *gate {
	resume := make(chan struct{})
	close(resume)
	return &gate{ns: ns, closed: make(chan struct{}), resume: resume, conns: map[*gateConn]struct{}{}}
}

// listen binds addr and starts accepting on it.
func (g *gate) listen(ctx context.Context, addr netip.AddrPort) error {
	ln, err := listenIn(ctx, g.ns, addr.String())
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		ln.Close()
		return net.ErrClosed
	}
	g.inner = ln
	g.addr = loopback.AddrPort(ln.Addr())
	return nil
}

// Accept waits for a connection; while the gate is hung it waits for the
// hang to end (connects meanwhile hit the blackhole).
func (g *gate) Accept() (net.Conn, error) {
	for {
		g.mu.Lock()
		inner, resume, done := g.inner, g.resume, g.done
		g.mu.Unlock()
		if done {
			return nil, net.ErrClosed
		}
		if inner == nil {
			select {
			case <-resume:
			case <-g.closed:
			}
			continue
		}
		c, err := inner.Accept()
		if err != nil {
			g.mu.Lock()
			swapped := g.inner != inner && !g.done
			g.mu.Unlock()
			if swapped {
				continue // closed for a hang
			}
			return nil, err
		}
		return g.track(c), nil
	}
}

// track wraps an accepted connection; after closeAll it is closed at
// once, as closeAll would have.
func (g *gate) track(c net.Conn) *gateConn {
	gc := &gateConn{Conn: c, g: g, closed: make(chan struct{})}
	g.mu.Lock()
	g.conns[gc] = struct{}{}
	shut := g.shut
	g.mu.Unlock()
	if shut != notShut {
		gc.shut(shut)
	}
	return gc
}

// Close stops accepting for good (grpc-go calls it on Stop and
// GracefulStop); accepted connections stay as they are.
func (g *gate) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return nil
	}
	g.done = true
	close(g.closed)
	var err error
	if g.inner != nil {
		err = g.inner.Close()
	}
	if g.hole != nil {
		g.hole.Close()
	}
	return err
}

// Addr returns the bound address (the configured one before listen).
func (g *gate) Addr() net.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	return net.TCPAddrFromAddrPort(g.addr)
}

// hang makes the gate hang (on true) or resume (on false). Hanging swaps the
// listening socket for a Blackhole on the same address; resuming listens
// again. It fails before listen and after Close.
func (g *gate) hang(ctx context.Context, on bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done || (g.inner == nil && g.hole == nil) {
		return ErrNotServing
	}
	hung := g.hole != nil
	switch {
	case on == hung:
		return nil
	case on:
		inner := g.inner
		g.inner, g.resume = nil, make(chan struct{})
		g.hung.Store(true)
		inner.Close()
		hole, err := NewBlackhole(ctx, g.addr, g.ns)
		if err != nil {
			g.relisten(ctx)
			return err
		}
		g.hole = hole
		return nil
	default:
		g.hole.Close()
		g.hole = nil
		return g.relisten(ctx)
	}
}

// relisten listens on the bound address again and ends a hang; g.mu held.
func (g *gate) relisten(ctx context.Context) error {
	ln, err := listenIn(ctx, g.ns, g.addr.String())
	if err != nil {
		return fmt.Errorf("pod: listening again after a hang: %w", err)
	}
	g.inner = ln
	close(g.resume)
	g.hung.Store(false)
	return nil
}

// wait blocks while the gate is hung; it returns false if closed (the
// connection) closes first.
func (g *gate) wait(closed <-chan struct{}) bool {
	if !g.hung.Load() {
		return true
	}
	g.mu.Lock()
	resume := g.resume
	g.mu.Unlock()
	select {
	case <-resume:
		return true
	case <-closed:
		return false
	}
}

// reset closes every accepted connection with RST instead of FIN (an
// SO_LINGER of zero), as the kernel does for the sockets of a process that
// died with data in flight (closeAll).
func (g *gate) reset() {
	g.closeAll(true)
}

// closeAll closes every accepted connection, and any accepted after it
// (with RST when rst; a later call with rst resets those still open),
// waking reads and writes stalled by a hang. Connections grpc-go is still
// handshaking are closed too: grpc-go's Stop waits for their handshakes,
// up to its 120 s connection timeout, and a hang holds a handshake's
// reads and writes, even its EOF and its timeout, with no bound.
func (g *gate) closeAll(rst bool) {
	mode := shutFIN
	if rst {
		mode = shutRST
	}
	g.mu.Lock()
	g.shut = max(g.shut, mode)
	conns := make([]*gateConn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		c.shut(mode)
	}
}

// gateConn is an accepted connection whose reads and writes stall while
// its gate is hung.
type gateConn struct {
	net.Conn
	g      *gate
	closed chan struct{}
	once   sync.Once
}

// Read reads, then holds the data back while the gate is hung.
func (c *gateConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.g.wait(c.closed)
	return n, err
}

// Write waits while the gate is hung, then writes.
func (c *gateConn) Write(p []byte) (int, error) {
	if !c.g.wait(c.closed) {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// shut closes the connection as a stopped gate does (closeAll).
func (c *gateConn) shut(mode shutMode) {
	if tc, ok := c.Conn.(*net.TCPConn); ok && mode == shutRST {
		tc.SetLinger(0)
	}
	c.Close()
}

// Close closes the connection and wakes any read or write stalled on it.
func (c *gateConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
	})
	return c.Conn.Close()
}
