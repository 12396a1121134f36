package load

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/grpcconn"
	"github.com/pinlab/pinlab/internal/loopback"
)

// connTable links the connections one channel dials to grpc-go's reports
// of them (grpcconn.Handler), so that a ConnEnd learns its CloseReason. It
// is keyed by local and remote address, which the dialled net.Conn and
// stats.ConnTagInfo both give: the local address alone is not unique, as
// the lab's dialer binds with IP_BIND_ADDRESS_NO_PORT and the kernel may
// then reuse a local port towards different servers. Safe for concurrent
// use.
type connTable struct {
	mu    sync.Mutex
	conns map[grpcconn.Conn]*watchedConn
}

func newConnTable() *connTable {
	return &connTable{conns: map[grpcconn.Conn]*watchedConn{}}
}

// dialer wraps dial so that every connection it dials is watched.
func (t *connTable) dialer(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return t.watch(c), nil
	}
}

// watch wraps c and enters it in the table until grpc-go reports its end
// or, if grpc-go never reported it open, until it is closed.
func (t *connTable) watch(c net.Conn) *watchedConn {
	w := &watchedConn{Conn: c, table: t, key: grpcconn.Conn{
		Local: loopback.AddrPort(c.LocalAddr()), Remote: loopback.AddrPort(c.RemoteAddr()),
	}}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conns[w.key] = w
	return w
}

// opened notes that grpc-go reported c open (stats.ConnBegin); its entry
// then stays until closed.
func (t *connTable) opened(c grpcconn.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.conns[c]; w != nil {
		w.reported = true
	}
}

// closed removes c, which grpc-go reported closed (stats.ConnEnd, which
// comes after the transport closed the net.Conn), and returns why it
// closed and, for a GOAWAY, when it arrived (else zero).
func (t *connTable) closed(c grpcconn.Conn) (CloseReason, time.Time) {
	t.mu.Lock()
	w := t.conns[c]
	delete(t.conns, c)
	t.mu.Unlock()
	if w == nil {
		return ReasonUnknown, time.Time{}
	}
	return w.reason()
}

// forget removes w if grpc-go never reported it open: no ConnEnd will come.
func (t *connTable) forget(w *watchedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns[w.key] == w && !w.reported {
		delete(t.conns, w.key)
	}
}

// watchedConn is a dialled connection that follows the server's HTTP/2
// frames as grpc-go reads them and records the first terminal event: a
// GOAWAY, a failed read, or a local Close. Reads pass through untouched;
// only the follower's bookkeeping is added.
type watchedConn struct {
	net.Conn
	table    *connTable
	key      grpcconn.Conn
	reported bool // grpc-go reported it open; guarded by table.mu

	mu     sync.Mutex // guards frames, end and goAway
	frames frameFollower
	end    CloseReason // the first terminal event; "" while none
	goAway time.Time   // when the GOAWAY that ended it was read
}

// Read reads from the connection and follows the frames read until a
// terminal event.
func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end == "" && n > 0 {
		if g, ok := c.frames.follow(p[:n]); ok {
			c.end, c.goAway = goAwayReason(g), time.Now()
		}
	}
	if err != nil && c.end == "" {
		if r, ok := ReadCloseReason(err); ok {
			c.end = r
		}
	}
	return n, err
}

// Close records a local close, unless something ended the connection
// first, and closes it.
func (c *watchedConn) Close() error {
	c.mu.Lock()
	if c.end == "" {
		c.end = ReasonClient
	}
	c.mu.Unlock()
	c.table.forget(c)
	return c.Conn.Close()
}

// reason returns the first terminal event, ReasonClient if none yet (the
// connection is closing without one), and when a GOAWAY arrived (zero if
// none ended it).
func (c *watchedConn) reason() (CloseReason, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end == "" {
		return ReasonClient, time.Time{}
	}
	return c.end, c.goAway
}
