package l7proxy

import (
	"bufio"
	"bytes"
	"net"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HTTP/2 flow-control and framing figures of the relay. The proxy offers
// each peer a 1 MiB window per stream and 16 MiB per connection, and keeps
// HTTP/2's default 16 KiB frames. A stream's window is credited back as its
// data is forwarded (so a slow receiver slows its sender); a connection's as
// data arrives.
const (
	streamWindow  = 1 << 20
	connWindow    = 1 << 24
	defaultWindow = 65535 // RFC 9113 initial window, before SETTINGS
	frameSize     = 16384 // RFC 9113 initial SETTINGS_MAX_FRAME_SIZE
)

// wire is the write side of one HTTP/2 connection: a Framer over a buffered
// writer and the connection's HPACK encoder. The owning connection's mutex
// guards it; frames leave on flush, so frames written while handling one
// batch of input go out in one write.
type wire struct {
	nc       net.Conn
	bw       *bufio.Writer
	fr       *http2.Framer
	enc      *hpack.Encoder
	hbuf     bytes.Buffer
	maxFrame uint32 // the peer's SETTINGS_MAX_FRAME_SIZE
	err      error  // first write error; the connection is then closed
	dirty    bool
}

// newWire returns the wire of nc and a Framer that reads from br and
// writes to the wire; the Framer's two halves are used by different
// goroutines, as Go's own HTTP/2 server does.
func newWire(nc net.Conn, br *bufio.Reader) *wire {
	w := &wire{nc: nc, bw: bufio.NewWriterSize(nc, 32<<10), maxFrame: frameSize}
	w.fr = http2.NewFramer(w.bw, br)
	w.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	w.fr.SetReuseFrames()
	w.fr.SetMaxReadFrameSize(frameSize)
	w.enc = hpack.NewEncoder(&w.hbuf)
	return w
}

// note records a write error.
func (w *wire) note(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
	w.dirty = true
}

// headers writes one header block as HEADERS plus CONTINUATION frames.
func (w *wire) headers(id uint32, end bool, fields []hpack.HeaderField) {
	w.hbuf.Reset()
	for _, f := range fields {
		w.enc.WriteField(f)
	}
	block := w.hbuf.Bytes()
	n := min(len(block), int(w.maxFrame))
	w.note(w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:n], EndStream: end, EndHeaders: n == len(block)}))
	for block = block[n:]; len(block) > 0; block = block[n:] {
		n = min(len(block), int(w.maxFrame))
		w.note(w.fr.WriteContinuation(id, n == len(block), block[:n]))
	}
}

// data writes p as DATA frames of at most maxFrame bytes, END_STREAM on the
// last when end.
func (w *wire) data(id uint32, end bool, p []byte) {
	for {
		n := min(len(p), int(w.maxFrame))
		last := n == len(p)
		w.note(w.fr.WriteData(id, end && last, p[:n]))
		if p = p[n:]; last {
			return
		}
	}
}

// flush sends what was written; a failed write closes the connection, so
// its reader ends and cleans up.
func (w *wire) flush() {
	if !w.dirty {
		return
	}
	w.dirty = false
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	if w.err != nil {
		w.nc.Close()
	}
}

// completeFrameBuffered reports whether br holds at least one whole frame,
// so a reader can go on without flushing what it wrote.
func completeFrameBuffered(br *bufio.Reader) bool {
	if br.Buffered() < 9 {
		return false
	}
	h, _ := br.Peek(3)
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	return br.Buffered() >= 9+n
}

// flusher is a connection whose wire can be flushed under its own lock.
type flusher interface{ flushWire() }

// batch collects the connections a reader wrote to while handling its
// buffered input; they are flushed once it runs dry.
type batch struct{ conns []flusher }

func (b *batch) add(c flusher) {
	for _, x := range b.conns {
		if x == c {
			return
		}
	}
	b.conns = append(b.conns, c)
}

func (b *batch) flush() {
	for _, c := range b.conns {
		c.flushWire()
	}
	b.conns = b.conns[:0]
}

// settingsOf decodes the settings of f.
func settingsOf(f *http2.SettingsFrame) map[http2.SettingID]uint32 {
	m := map[http2.SettingID]uint32{}
	f.ForeachSetting(func(s http2.Setting) error {
		m[s.ID] = s.Val
		return nil
	})
	return m
}
