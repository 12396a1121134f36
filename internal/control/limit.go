package control

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// limitListener keeps at most max connections open. When all are taken,
// Accept closes the one that has waited longest without a request in
// progress (new, or idle between requests) to make room, so that idle
// connections, which any local user can open, neither exhaust the
// process's file descriptors nor lock out a client that sends a request.
// If every connection has a request in progress, Accept waits for one to
// end; the server's timeouts bound that wait.
//
// netutil.LimitListener only waits, so idle connections up to the limit
// would block everyone else until their read timeouts.
//
// The http.Server must report its connection states through track.
type limitListener struct {
	net.Listener
	max int

	mu     sync.Mutex
	freed  *sync.Cond // signalled when a connection ends or Close is called
	conns  map[*limitConn]connState
	closed bool
}

// connState is what the limiter knows of a connection: whether a request
// is in progress, and since when it is in its state.
type connState struct {
	busy  bool
	since time.Time
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	l := &limitListener{Listener: ln, max: max, conns: map[*limitConn]connState{}}
	l.freed = sync.NewCond(&l.mu)
	return l
}

// Accept returns the next connection once there is room for it.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitConn{Conn: c, l: l}
	if !l.admit(lc) {
		c.Close()
		return nil, net.ErrClosed
	}
	return lc, nil
}

// admit makes room for c and records it; false means the listener closed
// while waiting.
func (l *limitListener) admit(c *limitConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.conns) >= l.max && !l.closed {
		if v := l.oldestIdle(); v != nil {
			delete(l.conns, v)
			v.Conn.Close() // the server sees the read fail and ends it
			continue
		}
		l.freed.Wait()
	}
	if l.closed {
		return false
	}
	l.conns[c] = connState{since: time.Now()}
	return true
}

// oldestIdle returns the connection without a request in progress that
// entered its state first, or nil.
func (l *limitListener) oldestIdle() *limitConn {
	var pick *limitConn
	var since time.Time
	for c, st := range l.conns {
		if !st.busy && (pick == nil || st.since.Before(since)) {
			pick, since = c, st.since
		}
	}
	return pick
}

// track is the http.Server's ConnState hook.
func (l *limitListener) track(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	switch state {
	case http.StateClosed, http.StateHijacked:
		l.release(lc)
	default:
		l.mu.Lock()
		if _, open := l.conns[lc]; open {
			l.conns[lc] = connState{busy: state == http.StateActive, since: time.Now()}
		}
		l.mu.Unlock()
	}
}

// release forgets c and wakes a waiting Accept.
func (l *limitListener) release(c *limitConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	l.freed.Signal()
}

// Close closes the listener and wakes a waiting Accept.
func (l *limitListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.freed.Broadcast()
	return l.Listener.Close()
}

// limitConn is a connection counted by its limitListener until closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	c.once.Do(func() { c.l.release(c) })
	return c.Conn.Close()
}
