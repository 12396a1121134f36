package l7proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"golang.org/x/net/http2"
)

// downConn is one client connection: HTTP/2 with prior knowledge, as
// grpc-go speaks it without TLS. One goroutine reads its frames and acts on
// them; responses are written by the upstream connections' readers.
type downConn struct {
	p    *Proxy
	nc   net.Conn
	br   *bufio.Reader
	info Conn

	mu          sync.Mutex // guards the fields below, every stream's guarded fields, and w
	w           *wire
	streams     map[uint32]*stream
	sendWin     int64 // the client's connection window for our DATA
	peerInit    int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	recvUnacked int64 // request bytes received and not yet credited
	lastID      uint32
	goingAway   bool // GOAWAY sent: no new streams; close when idle
	closing     bool // idle after GOAWAY: close once flushed
	halfClosed  bool
	closed      bool
}

func (p *Proxy) newDownConn(nc net.Conn) *downConn {
	br := bufio.NewReaderSize(nc, 32<<10)
	return &downConn{
		p: p, nc: nc, br: br, w: newWire(nc, br),
		info:    Conn{Local: loopback.AddrPort(nc.LocalAddr()), Remote: loopback.AddrPort(nc.RemoteAddr())},
		streams: map[uint32]*stream{},
		sendWin: defaultWindow, peerInit: defaultWindow,
	}
}

func (d *downConn) flushWire() {
	d.mu.Lock()
	d.w.flush()
	closing := d.closing && !d.closed && !d.halfClosed
	d.halfClosed = d.halfClosed || closing
	d.mu.Unlock()
	if closing {
		// Half-close so the client reads everything, then sees EOF and
		// closes; the reader then ends. A client that never does is cut
		// after a second.
		if cw, ok := d.nc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
			time.AfterFunc(time.Second, func() { d.nc.Close() })
		} else {
			d.nc.Close()
		}
	}
}

// serve runs the connection until it fails or closes.
func (d *downConn) serve() {
	defer d.shutdown()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(d.br, preface); err != nil || !bytes.Equal(preface, []byte(http2.ClientPreface)) {
		return
	}
	d.mu.Lock()
	d.w.note(d.w.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(d.p.cfg.MaxConcurrentStreams)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
	))
	d.w.note(d.w.fr.WriteWindowUpdate(0, connWindow-defaultWindow))
	d.mu.Unlock()
	d.flushWire()
	var b batch
	for {
		f, err := d.w.fr.ReadFrame()
		if err != nil {
			if se, ok := err.(http2.StreamError); ok {
				d.resetStream(se.StreamID, se.Code, &b)
				continue
			}
			b.flush()
			return
		}
		d.handle(f, &b)
		if !completeFrameBuffered(d.br) {
			b.flush()
		}
	}
}

func (d *downConn) handle(f http2.Frame, b *batch) {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		d.onHeaders(f, b)
	case *http2.DataFrame:
		d.onData(f, b)
	case *http2.RSTStreamFrame:
		d.mu.Lock()
		if s := d.streams[f.StreamID]; s != nil {
			d.p.cancelLocked(s, b)
		}
		d.mu.Unlock()
	case *http2.WindowUpdateFrame:
		d.onWindowUpdate(f.StreamID, int64(f.Increment), b)
	case *http2.SettingsFrame:
		if !f.IsAck() {
			d.onSettings(f, b)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			d.mu.Lock()
			d.w.note(d.w.fr.WritePing(true, f.Data))
			d.mu.Unlock()
			b.add(d)
		}
	}
}

// onHeaders starts a stream (the request headers) or ends one (request
// trailers).
func (d *downConn) onHeaders(f *http2.MetaHeadersFrame, b *batch) {
	p := d.p
	d.mu.Lock()
	if s := d.streams[f.StreamID]; s != nil {
		if !s.reqEnded { // request trailers
			if s.replay {
				s.trailers = f.Fields
			}
			s.reqEnded = true
			if u := s.up; u != nil {
				u.c.mu.Lock()
				u.c.sendTrailersLocked(u, f.Fields)
				u.c.mu.Unlock()
				b.add(u.c)
			}
		}
		d.mu.Unlock()
		return
	}
	if f.StreamID <= d.lastID || f.StreamID%2 == 0 {
		d.mu.Unlock()
		return // a closed or invalid stream: ignore
	}
	d.lastID = f.StreamID
	if d.goingAway || len(d.streams) >= p.cfg.MaxConcurrentStreams {
		d.w.note(d.w.fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream))
		d.mu.Unlock()
		b.add(d)
		return
	}
	s := &stream{
		d: d, id: f.StreamID, method: f.PseudoValue("path"), start: p.now(),
		hdrs: f.Fields, replay: true, reqEnded: f.StreamEnded(), sendWin: d.peerInit,
		ctype: "application/grpc",
	}
	if ct := fieldValue(f.Fields, "content-type"); strings.HasPrefix(ct, "application/grpc") {
		s.ctype = ct
	}
	d.streams[s.id] = s
	d.mu.Unlock()
	p.dispatch(s, b)
}

func (d *downConn) onData(f *http2.DataFrame, b *batch) {
	credit := int64(f.Length)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.recvUnacked += credit
	if d.recvUnacked >= connWindow/4 {
		d.w.note(d.w.fr.WriteWindowUpdate(0, uint32(d.recvUnacked)))
		d.recvUnacked = 0
		b.add(d)
	}
	s := d.streams[f.StreamID]
	if s == nil || s.reqEnded {
		return
	}
	d.p.requestDataLocked(s, f.Data(), f.StreamEnded(), credit, b)
}

// creditLocked gives n bytes of s's window back to the client, in
// WINDOW_UPDATEs of at least a quarter window.
func (d *downConn) creditLocked(s *stream, n int64, b *batch) {
	if n == 0 || s.done || s.reqEnded {
		return
	}
	s.recvUnacked += n
	if s.recvUnacked >= streamWindow/4 {
		d.w.note(d.w.fr.WriteWindowUpdate(s.id, uint32(s.recvUnacked)))
		s.recvUnacked = 0
		b.add(d)
	}
}

func (d *downConn) onWindowUpdate(id uint32, inc int64, b *batch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if id == 0 {
		d.sendWin += inc
		for _, s := range d.streams {
			d.p.drainLocked(s, b)
		}
		return
	}
	if s := d.streams[id]; s != nil {
		s.sendWin += inc
		d.p.drainLocked(s, b)
	}
}

func (d *downConn) onSettings(f *http2.SettingsFrame, b *batch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, v := range settingsOf(f) {
		switch id {
		case http2.SettingInitialWindowSize:
			delta := int64(v) - d.peerInit
			d.peerInit = int64(v)
			for _, s := range d.streams {
				s.sendWin += delta
				d.p.drainLocked(s, b)
			}
		case http2.SettingMaxFrameSize:
			d.w.maxFrame = v
		case http2.SettingHeaderTableSize:
			d.w.enc.SetMaxDynamicTableSizeLimit(v)
		}
	}
	d.w.note(d.w.fr.WriteSettingsAck())
	b.add(d)
}

// resetStream answers a malformed stream with RST_STREAM.
func (d *downConn) resetStream(id uint32, code http2.ErrCode, b *batch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.streams[id]; s != nil {
		d.p.cancelLocked(s, b)
	}
	d.w.note(d.w.fr.WriteRSTStream(id, code))
	b.add(d)
}

// goAway starts a graceful close: GOAWAY with the last stream taken, and
// the connection closes once its streams are done.
func (d *downConn) goAway() {
	d.mu.Lock()
	if !d.goingAway && !d.closed {
		d.goingAway = true
		d.w.note(d.w.fr.WriteGoAway(d.lastID, http2.ErrCodeNo, nil))
		d.closing = len(d.streams) == 0
	}
	d.mu.Unlock()
	d.flushWire()
}

// streamEnded closes a draining connection once its last stream is done.
func (d *downConn) streamEnded(b *batch) {
	if d.goingAway && len(d.streams) == 0 {
		d.closing = true
		b.add(d)
	}
}

// shutdown cancels the remaining streams and closes the connection.
func (d *downConn) shutdown() {
	var b batch
	d.mu.Lock()
	d.closed = true
	for _, s := range d.streams {
		d.p.cancelLocked(s, &b)
	}
	d.mu.Unlock()
	b.flush()
	d.nc.Close()
	if d.p.obs != nil {
		d.p.obs.Conn(d.info, false)
	}
	d.p.downs.remove(d)
}
