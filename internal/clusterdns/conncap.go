package clusterdns

import (
	"net"
	"sync"
)

// maxTCPConns bounds the open DNS-over-TCP connections. A query over TCP
// takes one short exchange, so a client rarely keeps one open long; any
// local user can open idle ones, though, and without a bound they would
// take every file descriptor of the lab's process (pods, proxies and
// clients share it). Past the bound the oldest connection is closed to
// make room, so new clients are always served.
const maxTCPConns = 256

// capListener keeps at most max accepted connections open, closing the
// oldest to admit a new one.
type capListener struct {
	net.Listener
	max int

	mu    sync.Mutex
	order []*capConn // oldest first
}

func (l *capListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &capConn{Conn: c, l: l}
	l.mu.Lock()
	var evict *capConn
	if len(l.order) >= l.max {
		evict, l.order = l.order[0], l.order[1:]
	}
	l.order = append(l.order, cc)
	l.mu.Unlock()
	if evict != nil {
		evict.Close() // its server goroutine sees the read fail and ends
	}
	return cc, nil
}

// forget removes c from the open connections.
func (l *capListener) forget(c *capConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, o := range l.order {
		if o == c {
			l.order = append(l.order[:i], l.order[i+1:]...)
			return
		}
	}
}

// capConn is a connection its capListener counts until it is closed.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	c.once.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}
