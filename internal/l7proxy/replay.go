package l7proxy

import (
	"errors"
	"io"
	"sync"
)

var (
	errReplayLimit  = errors.New("l7proxy: request body beyond the replay limit cannot be sent again")
	errStaleAttempt = errors.New("l7proxy: request body read by an abandoned attempt")
)

// replayBody lets one downstream request body feed several upstream
// attempts, as Envoy's retry buffer does: every byte read from src is kept
// (up to limit), and each attempt reads from the start, first what was kept,
// then on from src. Only the newest attempt may read; an older one's reader
// fails, and bytes it was still waiting for when it was abandoned are kept
// for the newest. Once more than limit bytes were read no new attempt can
// start. src is read by one reader at a time, without holding the lock while
// it blocks, so a new attempt can start while an abandoned one still waits
// for client data.
type replayBody struct {
	mu      sync.Mutex
	cond    sync.Cond // signalled when a src read ends
	src     io.Reader
	limit   int
	buf     []byte // bytes read from src, while !over
	total   int    // bytes read from src
	over    bool   // more than limit bytes were read
	err     error  // src's sticky error, io.EOF at the end
	gen     int    // the newest attempt
	reading bool   // a src read is in progress
}

func newReplayBody(src io.Reader, limit int) *replayBody {
	b := &replayBody{src: src, limit: limit}
	b.cond.L = &b.mu
	return b
}

// next returns the body of a new attempt, reading from the start, and
// abandons earlier ones. It is the attempts' Request.GetBody.
func (b *replayBody) next() (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over {
		return nil, errReplayLimit
	}
	b.gen++
	b.cond.Broadcast()
	return &replayReader{b: b, gen: b.gen}, nil
}

type replayReader struct {
	b   *replayBody
	gen int
	off int // bytes this reader returned
}

// Close does nothing: the server owns the downstream body.
func (r *replayReader) Close() error { return nil }

func (r *replayReader) Read(p []byte) (int, error) {
	b := r.b
	b.mu.Lock()
	for {
		switch {
		case r.gen != b.gen:
			b.mu.Unlock()
			return 0, errStaleAttempt
		case r.off < b.total && b.over:
			b.mu.Unlock()
			return 0, errReplayLimit
		case r.off < b.total:
			n := copy(p, b.buf[r.off:])
			r.off += n
			b.mu.Unlock()
			return n, nil
		case b.err != nil:
			b.mu.Unlock()
			return 0, b.err
		case !b.reading:
			return r.readSource(p)
		}
		b.cond.Wait()
	}
}

// readSource reads from src with b.mu held on entry; it releases the lock
// while the read blocks.
func (r *replayReader) readSource(p []byte) (int, error) {
	b := r.b
	b.reading = true
	b.mu.Unlock()
	n, err := b.src.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	b.cond.Broadcast()
	b.total += n
	if !b.over && len(b.buf)+n > b.limit {
		b.over, b.buf = true, nil
	} else if !b.over {
		b.buf = append(b.buf, p[:n]...)
	}
	if err != nil {
		b.err = err
	}
	if r.gen != b.gen {
		return 0, errStaleAttempt // the bytes stay in buf for the newest attempt
	}
	r.off += n
	return n, err
}
