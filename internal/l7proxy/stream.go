package l7proxy

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// stream is one client request (one gRPC call) and its current attempt on a
// pod. The fields below the first block are guarded by d.mu.
type stream struct {
	d      *downConn
	id     uint32
	method string
	ctype  string
	start  time.Duration

	hdrs     []hpack.HeaderField // request headers, kept for a retry until the response starts
	body     [][]byte            // request data sent so far, kept for a retry
	bodyN    int
	replay   bool // hdrs and body hold everything sent so far
	trailers []hpack.HeaderField
	reqEnded bool // the client sent END_STREAM

	up       *upStream   // the current attempt; nil before and after
	lastEP   *endpoint   // the endpoint of the last attempt
	tried    []*endpoint // endpoints whose connect failed
	avoid    *endpoint   // the endpoint that refused the stream: picked only if alone
	attempts int
	lastErr  error

	respStarted bool
	httpStatus  int
	sendWin     int64   // the client's window for this stream's response data
	pending     []chunk // response data waiting for that window
	recvUnacked int64   // request bytes forwarded and not yet credited to the client
	done        bool
}

// chunk is data waiting for a flow-control window: credit is what to give
// back to the sender once it is written; end ends the stream after it, with
// trailers if any.
type chunk struct {
	data     []byte
	credit   int64
	end      bool
	trailers []hpack.HeaderField
}

// upStream is one attempt of a stream on an upstream connection. Fields
// after id are guarded by c.mu, except gotData (d.mu).
type upStream struct {
	s  *stream
	c  *upConn
	ep *endpoint
	t0 time.Duration
	id uint32

	sendWin     int64   // the pod's window for this stream's request data
	pending     []chunk // request data waiting for that window
	recvUnacked int64   // response bytes forwarded and not yet credited to the pod
	closed      bool    // no longer in c.streams

	gotData bool // first response data (or the end) seen
}

// dispatch sends s to an endpoint the policy picks. A connect that fails is
// tried on another endpoint, up to MaxAttempts; an endpoint whose connection
// cannot take the stream (GOAWAY, closed) costs nothing and is picked again.
func (p *Proxy) dispatch(s *stream, b *batch) {
	d := s.d
	for {
		ep := p.pick(s.tried, s.avoid)
		if ep == nil {
			d.mu.Lock()
			p.failLocked(s, codes.Unavailable, p.noRouteMessage(s), b)
			d.mu.Unlock()
			return
		}
		c, err := ep.conn(p)
		d.mu.Lock()
		if !s.done {
			s.lastEP = ep
		}
		if err != nil || s.done {
			p.firstData(ep, p.now(), false)
			p.release(ep)
		}
		switch {
		case s.done:
		case err != nil:
			s.attempts++
			s.lastErr = err
			if !isRefused(err) || s.attempts >= p.cfg.MaxAttempts {
				p.failLocked(s, codes.Unavailable, p.noRouteMessage(s), b)
				break
			}
			s.tried = append(s.tried, ep)
			d.mu.Unlock()
			continue
		case !c.open(s, ep, b):
			p.firstData(ep, p.now(), false)
			p.release(ep)
			d.mu.Unlock()
			continue
		default:
			s.attempts++
		}
		d.mu.Unlock()
		return
	}
}

// noRouteMessage is the grpc-message of a request that got no response.
func (p *Proxy) noRouteMessage(s *stream) string {
	if s.lastErr == nil {
		return "no healthy upstream" // Envoy's words
	}
	return "upstream connect error or disconnect/reset before headers: " + s.lastErr.Error()
}

// retry sends s elsewhere after its attempt u was refused by the pod
// (REFUSED_STREAM, or beyond a GOAWAY's last stream): the pod did not
// process it, so it is safe if everything sent is still at hand.
func (p *Proxy) retry(u *upStream) {
	s, d := u.s, u.s.d
	var b batch
	defer b.flush()
	d.mu.Lock()
	if s.done || s.up != u {
		d.mu.Unlock()
		return
	}
	p.endAttemptLocked(s, false, &b)
	s.avoid = u.ep
	if !s.replay || s.attempts >= p.cfg.MaxAttempts {
		s.lastErr = errors.New("refused by the pod and cannot be sent again")
		p.failLocked(s, codes.Unavailable, p.noRouteMessage(s), &b)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	p.dispatch(s, &b)
}

// endAttemptLocked ends s's current attempt: the pod's stream is reset if
// still open, and the endpoint's load figures settle (sample: whether the
// attempt's time is a latency sample for peak EWMA).
func (p *Proxy) endAttemptLocked(s *stream, sample bool, b *batch) {
	u := s.up
	if u == nil {
		return
	}
	s.up = nil
	c := u.c
	c.mu.Lock()
	if !u.closed {
		c.w.note(c.w.fr.WriteRSTStream(u.id, http2.ErrCodeCancel))
		c.removeLocked(u)
		b.add(c)
	}
	c.mu.Unlock()
	if !u.gotData {
		u.gotData = true
		p.firstData(u.ep, u.t0, sample)
	}
	p.release(u.ep)
}

// finishLocked completes s: the client has its whole response (or gave
// up), the attempt ends, and the Observer hears of the call.
func (p *Proxy) finishLocked(s *stream, code codes.Code, b *batch) {
	if s.done {
		return
	}
	s.done = true
	d := s.d
	delete(d.streams, s.id)
	p.endAttemptLocked(s, true, b)
	if !s.reqEnded && !d.closed && code != codes.Canceled {
		// RFC 9113 8.1: a complete response may end the request early.
		d.w.note(d.w.fr.WriteRSTStream(s.id, http2.ErrCodeNo))
		b.add(d)
	}
	d.streamEnded(b)
	if p.obs == nil {
		return
	}
	c := Call{Method: s.method, Attempts: s.attempts, Duration: p.now() - s.start, Code: code}
	if ep := s.lastEP; ep != nil {
		c.Endpoint, c.Pod = ep.addr, ep.pod
	}
	p.obs.Call(c)
}

// failLocked ends s with a gRPC status from the proxy: a Trailers-Only
// response if nothing was sent yet, else trailers after what was.
func (p *Proxy) failLocked(s *stream, code codes.Code, msg string, b *batch) {
	if s.done {
		return
	}
	d := s.d
	if !d.closed {
		var fs []hpack.HeaderField
		if !s.respStarted {
			fs = append(fs, hpack.HeaderField{Name: ":status", Value: "200"}, hpack.HeaderField{Name: "content-type", Value: s.ctype})
		}
		fs = append(fs, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(code))},
			hpack.HeaderField{Name: "grpc-message", Value: encodeMessage(msg)})
		s.pending = nil
		d.w.headers(s.id, true, fs)
		b.add(d)
	}
	p.finishLocked(s, code, b)
}

// cancelLocked ends s because the client reset it or went away.
func (p *Proxy) cancelLocked(s *stream, b *batch) {
	p.endAttemptLocked(s, false, b)
	p.finishLocked(s, codes.Canceled, b)
}

// requestData forwards request data from the client to s's attempt, keeping
// a copy while a retry could need it. credit is the frame's flow-control
// size, given back to the client once the data is written to the pod.
func (p *Proxy) requestDataLocked(s *stream, data []byte, end bool, credit int64, b *batch) {
	if s.replay {
		if s.bodyN+len(data) > p.cfg.ReplayLimit {
			s.replay, s.body = false, nil
		} else {
			s.body = append(s.body, slices.Clone(data))
			s.bodyN += len(data)
		}
	}
	s.reqEnded = end
	u := s.up
	if u == nil { // between attempts: kept in body (or lost, and the retry fails)
		s.d.creditLocked(s, credit, b)
		return
	}
	c := u.c
	c.mu.Lock()
	credit = c.sendLocked(u, data, end, credit)
	c.mu.Unlock()
	b.add(c)
	s.d.creditLocked(s, credit, b)
}

// responseHeadersLocked forwards a HEADERS block from the pod: the response
// headers, or with end the trailers (or a Trailers-Only response).
func (p *Proxy) responseHeadersLocked(s *stream, u *upStream, fields []hpack.HeaderField, end bool, b *batch) {
	d := s.d
	if !s.respStarted {
		s.respStarted = true
		s.replay, s.body, s.hdrs = false, nil, nil
		s.httpStatus, _ = strconv.Atoi(fieldValue(fields, ":status"))
	}
	if end && !u.gotData {
		u.gotData = true
		p.firstData(u.ep, u.t0, true)
	}
	if end && len(s.pending) > 0 {
		s.pending = append(s.pending, chunk{end: true, trailers: fields})
		return
	}
	d.w.headers(s.id, end, fields)
	b.add(d)
	if end {
		p.finishLocked(s, s.codeOf(fields), b)
	}
}

// responseDataLocked forwards response data from the pod to the client
// within the client's windows, queueing the rest.
func (p *Proxy) responseDataLocked(s *stream, u *upStream, data []byte, end bool, credit int64, b *batch) {
	if !u.gotData {
		u.gotData = true
		p.firstData(u.ep, u.t0, true)
	}
	d := s.d
	if len(s.pending) == 0 {
		n := int(min(int64(len(data)), s.sendWin, d.sendWin))
		if n == len(data) {
			d.w.data(s.id, end, data)
			s.sendWin -= int64(n)
			d.sendWin -= int64(n)
			b.add(d)
			u.c.creditPod(u, credit, b)
			if end {
				p.finishLocked(s, s.codeOf(nil), b)
			}
			return
		}
		if n > 0 {
			d.w.data(s.id, false, data[:n])
			s.sendWin -= int64(n)
			d.sendWin -= int64(n)
			data = data[n:]
			b.add(d)
		}
	}
	s.pending = append(s.pending, chunk{data: slices.Clone(data), credit: credit, end: end})
}

// drainLocked writes s's queued response data as the client's windows
// allow.
func (p *Proxy) drainLocked(s *stream, b *batch) {
	d := s.d
	for len(s.pending) > 0 && !s.done {
		ch := &s.pending[0]
		n := int(min(int64(len(ch.data)), s.sendWin, d.sendWin))
		if n < len(ch.data) {
			if n > 0 {
				d.w.data(s.id, false, ch.data[:n])
				ch.data = ch.data[n:]
				s.sendWin -= int64(n)
				d.sendWin -= int64(n)
				b.add(d)
			}
			return
		}
		if n > 0 || !ch.end || ch.trailers == nil {
			d.w.data(s.id, ch.end && ch.trailers == nil, ch.data)
		}
		s.sendWin -= int64(n)
		d.sendWin -= int64(n)
		b.add(d)
		if u := s.up; u != nil {
			u.c.creditPod(u, ch.credit, b)
		}
		s.pending = s.pending[1:]
		if ch.end {
			if ch.trailers != nil {
				d.w.headers(s.id, true, ch.trailers)
			}
			p.finishLocked(s, s.codeOf(ch.trailers), b)
		}
	}
}

// codeOf is the call's gRPC status, from the final header block (or from
// the HTTP status when the pod sent none, as http-grpc-status-mapping.md).
func (s *stream) codeOf(fields []hpack.HeaderField) codes.Code {
	if v := fieldValue(fields, "grpc-status"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return codes.Unknown
		}
		return codes.Code(n)
	}
	return httpCode(s.httpStatus)
}

func fieldValue(fields []hpack.HeaderField, name string) string {
	for _, f := range fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// isRefused reports whether err means the request never left the proxy.
func isRefused(err error) bool {
	var de *dialError
	return errors.As(err, &de)
}

// pick returns an acquired endpoint from the current table that is not in
// tried, nor avoid unless it is the only one left; nil if there is none.
func (p *Proxy) pick(tried []*endpoint, avoid *endpoint) *endpoint {
	for range 16 { // acquire fails only when a sync retired the endpoint
		eps := p.table.Load().eps
		if len(tried) > 0 || avoid != nil {
			left := slices.DeleteFunc(slices.Clone(eps), func(ep *endpoint) bool { return slices.Contains(tried, ep) })
			eps = slices.DeleteFunc(slices.Clone(left), func(ep *endpoint) bool { return ep == avoid })
			if len(eps) == 0 {
				eps = left
			}
		}
		if len(eps) == 0 {
			return nil
		}
		if ep := p.bal.pick(eps, p.now()); p.acquire(ep) {
			return ep
		}
	}
	return nil
}
