package clusterdns

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// maxTCPConns bounds the open DNS-over-TCP connections. A query over TCP
// takes one short exchange, so a client rarely keeps one open long; any
// local user can open idle ones, though, and without a bound they would
// take every file descriptor of the lab's process (pods, proxies and
// clients share it).
const maxTCPConns = 256

// TCP timeouts, as miekg/dns's defaults (CoreDNS's are 5 s and 10 s): the
// first query of a connection must arrive whole within tcpReadTimeout of
// its accept, each later one within tcpIdleTimeout of the answer before,
// else the connection is closed. A slow sender (slowloris) or an idle
// holder thus keeps a connection for seconds, not forever.
const (
	tcpReadTimeout = 2 * time.Second
	tcpIdleTimeout = 8 * time.Second
)

// capListener keeps at most max accepted connections open. To admit one
// past the bound it closes another, chosen so that one client cannot
// take everyone else's connections:
//
//  1. from the client address holding the most connections (the lab's
//     clients each have their own pod address; a process holding many
//     connections pays for them itself);
//  2. of those, the connection idle longest: no query being read or
//     answered and no bytes waiting in its receive buffer (a pipelined
//     query, or one not read yet, counts as a query under way);
//  3. if every one has a query under way, the one whose query has been
//     under way longest: a real query is answered within milliseconds, so
//     that is a slow sender's.
//
// (The bound used to close the oldest connection, whatever it did: a local
// process holding 500 idle connections and reconnecting made 9 of 30
// valid queries from others fail.) A process that spreads its connections
// over many loopback addresses is bounded by the timeouts only.
type capListener struct {
	net.Listener
	max int

	mu       sync.Mutex
	bySource map[netip.Addr]map[*capConn]struct{}
	n        int
}

func (l *capListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &capConn{Conn: c, l: l, since: time.Now(), source: sourceOf(c)}
	l.mu.Lock()
	if l.bySource == nil {
		l.bySource = map[netip.Addr]map[*capConn]struct{}{}
	}
	var evict *capConn
	if l.n >= l.max {
		evict = l.pickLocked(cc.source)
		l.forgetLocked(evict)
	}
	if l.bySource[cc.source] == nil {
		l.bySource[cc.source] = map[*capConn]struct{}{}
	}
	l.bySource[cc.source][cc] = struct{}{}
	l.n++
	l.mu.Unlock()
	if evict != nil {
		evict.closeConn() // its server goroutine sees the read fail and ends
	}
	return cc, nil
}

// sourceOf is c's client address (the zero Addr when it has none).
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// pickLocked chooses the connection to close to admit one from newcomer
// (see capListener); at least one is open.
func (l *capListener) pickLocked(newcomer netip.Addr) *capConn {
	var most netip.Addr
	count := -1
	for src, conns := range l.bySource {
		n := len(conns)
		if src == newcomer {
			n++ // the newcomer's address counts its new connection
		}
		if n > count || n == count && src == newcomer {
			most, count = src, n
		}
	}
	if len(l.bySource[most]) == 0 { // the newcomer's first: take from the largest other
		most, count = netip.Addr{}, -1
		for src, conns := range l.bySource {
			if len(conns) > count {
				most, count = src, len(conns)
			}
		}
	}
	var idle, busy *capConn
	var idleSince, busySince time.Time
	for c := range l.bySource[most] {
		c.mu.Lock()
		since, underWay := c.since, c.underWay
		c.mu.Unlock()
		// Bytes waiting (a query not read yet) put a query under way; the
		// syscall is made only for a connection that would be the pick.
		if !underWay && (idle == nil || since.Before(idleSince)) {
			if !pending(c.Conn) {
				idle, idleSince = c, since
				continue
			}
			underWay = true
		}
		if underWay && (busy == nil || since.Before(busySince)) {
			busy, busySince = c, since
		}
	}
	if idle != nil {
		return idle
	}
	return busy
}

// forgetLocked removes c from the open connections, once.
func (l *capListener) forgetLocked(c *capConn) {
	conns := l.bySource[c.source]
	if _, ok := conns[c]; !ok {
		return
	}
	delete(conns, c)
	if len(conns) == 0 {
		delete(l.bySource, c.source)
	}
	l.n--
}

// capConn is a connection its capListener counts until it is closed, with
// what it is doing: idle since a time (its accept, or the end of its last
// answer), or reading or answering a query since a time.
type capConn struct {
	net.Conn
	l      *capListener
	source netip.Addr
	once   sync.Once

	mu       sync.Mutex
	underWay bool
	since    time.Time
	unsent   int // bytes of the answer being written still to come
}

// Read marks a query under way from its first byte.
func (c *capConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if !c.underWay {
			c.underWay, c.since = true, time.Now()
		}
		c.mu.Unlock()
	}
	return n, err
}

// Write marks the connection idle once a whole answer is written: its
// two-byte length and as many bytes of message (miekg/dns writes the two
// in separate calls here).
func (c *capConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	if c.unsent == 0 && n >= 2 {
		c.unsent = 2 + (int(b[0])<<8 | int(b[1]))
	}
	if c.unsent = max(c.unsent-n, 0); c.unsent == 0 || err != nil {
		c.underWay, c.since, c.unsent = false, time.Now(), 0
	}
	c.mu.Unlock()
	return n, err
}

func (c *capConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.forgetLocked(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// closeConn closes c for the listener, which has forgotten it already.
func (c *capConn) closeConn() {
	c.once.Do(func() {})
	c.Conn.Close()
}
