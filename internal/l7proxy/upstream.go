package l7proxy

import (
	"bufio"
	"context"
	"math"
	"net"
	"slices"
	"sync"

	"github.com/pinlab/pinlab/internal/loopback"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// upConn is one HTTP/2 connection to a pod. One goroutine reads its frames
// and forwards responses to the clients; requests are written by the client
// connections' readers. Lock order: a downConn's mu before an upConn's mu.
type upConn struct {
	p    *Proxy
	ep   *endpoint
	nc   net.Conn
	br   *bufio.Reader
	info Conn

	mu          sync.Mutex // guards the fields below, every upStream's guarded fields, and w
	w           *wire
	streams     map[uint32]*upStream
	nextID      uint32
	sendWin     int64  // the pod's connection window for our DATA
	peerInit    int64  // the pod's SETTINGS_INITIAL_WINDOW_SIZE
	maxStreams  uint32 // the pod's SETTINGS_MAX_CONCURRENT_STREAMS
	recvUnacked int64  // response bytes received and not yet credited
	goaway      bool   // the pod sent GOAWAY: no new streams
	closed      bool
}

// dialUp connects to ep from Config.Source and starts the connection's
// reader. A failed connect is a *dialError: nothing was sent.
func (p *Proxy) dialUp(ep *endpoint) (*upConn, error) {
	nc, err := p.dialer.DialContext(context.Background(), ep.host)
	if err != nil {
		return nil, &dialError{ep.addr, err}
	}
	br := bufio.NewReaderSize(nc, 32<<10)
	c := &upConn{
		p: p, ep: ep, nc: nc, br: br, w: newWire(nc, br),
		info:    Conn{Local: loopback.AddrPort(nc.LocalAddr()), Remote: ep.addr, Pod: ep.pod, Upstream: true},
		streams: map[uint32]*upStream{}, nextID: 1,
		sendWin: defaultWindow, peerInit: defaultWindow, maxStreams: math.MaxUint32,
	}
	c.mu.Lock()
	c.w.bw.WriteString(http2.ClientPreface)
	c.w.note(c.w.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
	))
	c.w.note(c.w.fr.WriteWindowUpdate(0, connWindow-defaultWindow))
	c.mu.Unlock()
	if !p.ups.add(c, c.serve) {
		nc.Close()
		return nil, &dialError{ep.addr, errProxyClosed}
	}
	if p.obs != nil {
		p.obs.Conn(c.info, true)
	}
	return c, nil
}

func (c *upConn) flushWire() {
	c.mu.Lock()
	c.w.flush()
	c.mu.Unlock()
}

// usable reports whether c can take a new stream.
func (c *upConn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && !c.goaway && uint32(len(c.streams)) < c.maxStreams && c.nextID < math.MaxInt32-2
}

// open starts s's attempt on c, sending the request headers and whatever
// request data and trailers the client has sent so far; false if c can take
// no new stream (nothing was sent). The caller holds s.d.mu.
func (c *upConn) open(s *stream, ep *endpoint, b *batch) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.goaway || uint32(len(c.streams)) >= c.maxStreams || c.nextID >= math.MaxInt32-2 {
		return false
	}
	u := &upStream{s: s, c: c, ep: ep, t0: c.p.now(), id: c.nextID, sendWin: c.peerInit}
	c.nextID += 2
	c.streams[u.id] = u
	s.up = u
	end := s.reqEnded && s.trailers == nil
	c.w.headers(u.id, end && len(s.body) == 0, s.hdrs)
	for i, data := range s.body {
		c.sendLocked(u, data, end && i == len(s.body)-1, 0)
	}
	if s.trailers != nil {
		c.sendTrailersLocked(u, s.trailers)
	}
	b.add(c)
	return true
}

// sendLocked writes request data to the pod within its windows, queueing
// the rest; it returns the credit to give back to the client now (0 when
// the data waits).
func (c *upConn) sendLocked(u *upStream, data []byte, end bool, credit int64) int64 {
	if u.closed {
		return credit
	}
	if len(u.pending) == 0 {
		n := int(min(int64(len(data)), u.sendWin, c.sendWin))
		if n == len(data) {
			c.w.data(u.id, end, data)
			u.sendWin -= int64(n)
			c.sendWin -= int64(n)
			return credit
		}
		if n > 0 {
			c.w.data(u.id, false, data[:n])
			u.sendWin -= int64(n)
			c.sendWin -= int64(n)
			data = data[n:]
		}
	}
	u.pending = append(u.pending, chunk{data: slices.Clone(data), credit: credit, end: end})
	return 0
}

// sendTrailersLocked ends the request with trailers, after queued data.
func (c *upConn) sendTrailersLocked(u *upStream, fields []hpack.HeaderField) {
	if u.closed {
		return
	}
	if len(u.pending) > 0 {
		u.pending = append(u.pending, chunk{end: true, trailers: fields})
		return
	}
	c.w.headers(u.id, true, fields)
}

// credit is flow-control credit owed to a client for its stream.
type credit struct {
	s *stream
	n int64
}

// drainLocked writes u's queued request data as the pod's windows allow.
func (c *upConn) drainLocked(u *upStream, owed []credit) []credit {
	for len(u.pending) > 0 {
		ch := &u.pending[0]
		n := int(min(int64(len(ch.data)), u.sendWin, c.sendWin))
		if n < len(ch.data) {
			if n > 0 {
				c.w.data(u.id, false, ch.data[:n])
				ch.data = ch.data[n:]
				u.sendWin -= int64(n)
				c.sendWin -= int64(n)
			}
			return owed
		}
		if ch.trailers != nil {
			c.w.headers(u.id, true, ch.trailers)
		} else {
			c.w.data(u.id, ch.end, ch.data)
		}
		u.sendWin -= int64(n)
		c.sendWin -= int64(n)
		owed = append(owed, credit{u.s, ch.credit})
		u.pending = u.pending[1:]
	}
	return owed
}

// pay gives drained request bytes back to the clients.
func (c *upConn) pay(owed []credit, b *batch) {
	for _, o := range owed {
		d := o.s.d
		d.mu.Lock()
		d.creditLocked(o.s, o.n, b)
		d.mu.Unlock()
	}
}

// creditPod gives n bytes of u's window back to the pod once forwarded, in
// WINDOW_UPDATEs of at least a quarter window.
func (c *upConn) creditPod(u *upStream, n int64, b *batch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u.closed || n == 0 {
		return
	}
	u.recvUnacked += n
	if u.recvUnacked >= streamWindow/4 {
		c.w.note(c.w.fr.WriteWindowUpdate(u.id, uint32(u.recvUnacked)))
		u.recvUnacked = 0
		b.add(c)
	}
}

// removeLocked forgets u; a connection that got GOAWAY closes with its last
// stream.
func (c *upConn) removeLocked(u *upStream) {
	if u.closed {
		return
	}
	u.closed = true
	u.pending = nil
	delete(c.streams, u.id)
	if c.goaway && len(c.streams) == 0 {
		c.nc.Close()
	}
}

// serve reads the pod's frames until the connection ends.
func (c *upConn) serve() {
	var err error
	defer func() { c.shutdown(err) }()
	var b batch
	for {
		var f http2.Frame
		if f, err = c.w.fr.ReadFrame(); err != nil {
			if se, ok := err.(http2.StreamError); ok {
				c.onReset(se.StreamID, se.Code, &b)
				c.mu.Lock()
				c.w.note(c.w.fr.WriteRSTStream(se.StreamID, se.Code))
				c.mu.Unlock()
				b.add(c)
				continue
			}
			b.flush()
			return
		}
		c.handle(f, &b)
		if !completeFrameBuffered(c.br) {
			b.flush()
		}
	}
}

func (c *upConn) handle(f http2.Frame, b *batch) {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		c.onHeaders(f, b)
	case *http2.DataFrame:
		c.onData(f, b)
	case *http2.RSTStreamFrame:
		c.onReset(f.StreamID, f.ErrCode, b)
	case *http2.WindowUpdateFrame:
		c.onWindowUpdate(f.StreamID, int64(f.Increment), b)
	case *http2.SettingsFrame:
		if !f.IsAck() {
			c.onSettings(f, b)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			c.w.note(c.w.fr.WritePing(true, f.Data))
			c.mu.Unlock()
			b.add(c)
		}
	case *http2.GoAwayFrame:
		c.onGoAway(f)
	}
}

// take returns the attempt of a stream frame, forgetting it when end.
func (c *upConn) take(id uint32, end bool) *upStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.streams[id]
	if u != nil && end {
		c.removeLocked(u)
	}
	return u
}

func (c *upConn) onHeaders(f *http2.MetaHeadersFrame, b *batch) {
	u := c.take(f.StreamID, f.StreamEnded())
	if u == nil {
		return
	}
	s := u.s
	s.d.mu.Lock()
	if !s.done && s.up == u {
		c.p.responseHeadersLocked(s, u, f.Fields, f.StreamEnded(), b)
	}
	s.d.mu.Unlock()
}

func (c *upConn) onData(f *http2.DataFrame, b *batch) {
	n := int64(f.Length)
	c.mu.Lock()
	c.recvUnacked += n
	if c.recvUnacked >= connWindow/4 {
		c.w.note(c.w.fr.WriteWindowUpdate(0, uint32(c.recvUnacked)))
		c.recvUnacked = 0
		b.add(c)
	}
	c.mu.Unlock()
	u := c.take(f.StreamID, f.StreamEnded())
	if u == nil {
		return
	}
	s := u.s
	s.d.mu.Lock()
	if !s.done && s.up == u {
		c.p.responseDataLocked(s, u, f.Data(), f.StreamEnded(), n, b)
	}
	s.d.mu.Unlock()
}

// onReset handles the pod resetting a stream: REFUSED_STREAM means it did
// not process it, so it goes elsewhere; anything else ends the call with
// UNAVAILABLE.
func (c *upConn) onReset(id uint32, code http2.ErrCode, b *batch) {
	u := c.take(id, true)
	if u == nil {
		return
	}
	if code == http2.ErrCodeRefusedStream {
		c.p.wg.Go(func() { c.p.retry(u) })
		return
	}
	s := u.s
	s.d.mu.Lock()
	if !s.done && s.up == u {
		c.p.endAttemptLocked(s, true, b)
		c.p.failLocked(s, codes.Unavailable, "upstream reset: "+code.String(), b)
	}
	s.d.mu.Unlock()
}

func (c *upConn) onWindowUpdate(id uint32, inc int64, b *batch) {
	var owed []credit
	c.mu.Lock()
	if id == 0 {
		c.sendWin += inc
		for _, u := range c.streams {
			owed = c.drainLocked(u, owed)
		}
	} else if u := c.streams[id]; u != nil {
		u.sendWin += inc
		owed = c.drainLocked(u, owed)
	}
	c.mu.Unlock()
	b.add(c)
	c.pay(owed, b)
}

func (c *upConn) onSettings(f *http2.SettingsFrame, b *batch) {
	var owed []credit
	c.mu.Lock()
	for id, v := range settingsOf(f) {
		switch id {
		case http2.SettingInitialWindowSize:
			delta := int64(v) - c.peerInit
			c.peerInit = int64(v)
			for _, u := range c.streams {
				u.sendWin += delta
				owed = c.drainLocked(u, owed)
			}
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = v
		case http2.SettingMaxFrameSize:
			c.w.maxFrame = v
		case http2.SettingHeaderTableSize:
			c.w.enc.SetMaxDynamicTableSizeLimit(v)
		}
	}
	c.w.note(c.w.fr.WriteSettingsAck())
	c.mu.Unlock()
	b.add(c)
	c.pay(owed, b)
}

// onGoAway stops new streams on c; those the pod will not process (beyond
// its last stream) go elsewhere.
func (c *upConn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	c.goaway = true
	var refused []*upStream
	for id, u := range c.streams {
		if id > f.LastStreamID {
			refused = append(refused, u)
		}
	}
	for _, u := range refused {
		c.removeLocked(u)
	}
	if len(c.streams) == 0 {
		c.nc.Close()
	}
	c.mu.Unlock()
	for _, u := range refused {
		c.p.wg.Go(func() { c.p.retry(u) })
	}
}

// shutdown fails the streams left on a lost connection: they may have run,
// so they get UNAVAILABLE, never a retry.
func (c *upConn) shutdown(err error) {
	c.mu.Lock()
	c.closed = true
	left := make([]*upStream, 0, len(c.streams))
	for _, u := range c.streams {
		left = append(left, u)
	}
	for _, u := range left {
		c.removeLocked(u)
	}
	c.mu.Unlock()
	c.nc.Close()
	c.ep.removeConn(c)
	c.p.ups.remove(c)
	if c.p.obs != nil {
		c.p.obs.Conn(c.info, false)
	}
	var b batch
	for _, u := range left {
		s := u.s
		s.d.mu.Lock()
		if !s.done && s.up == u {
			c.p.endAttemptLocked(s, true, &b)
			c.p.failLocked(s, codes.Unavailable, "upstream connection lost: "+err.Error(), &b)
		}
		s.d.mu.Unlock()
	}
	b.flush()
}
