package l7proxy

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
)

// forwarder is the ReverseProxy's Transport: for every attempt it picks an
// endpoint and sends the request on that endpoint's connection pool.
type forwarder struct{ p *Proxy }

// routeError is a request that got no response: no endpoint was eligible
// (ep nil), or the last attempt failed.
type routeError struct {
	ep       *endpoint
	attempts int
	start    time.Duration
	err      error
}

func (e *routeError) Error() string {
	if e.ep == nil {
		return "no healthy upstream"
	}
	return "upstream connect error or disconnect/reset before headers: " + e.err.Error()
}

func (e *routeError) Unwrap() error { return e.err }

// RoundTrip sends req to an endpoint the policy picks. A request refused
// before anything reached a pod (the connect failed) goes to another
// endpoint, each tried at most once, up to Config.MaxAttempts; the HTTP/2
// transport itself resends, on a new connection to the same endpoint, a
// request whose stream the pod never processed (GOAWAY before the stream,
// REFUSED_STREAM). Any other failure may have reached the pod and is never
// retried.
func (f forwarder) RoundTrip(req *http.Request) (*http.Response, error) {
	p := f.p
	start := p.now()
	var body *replayBody
	if req.Body != nil && req.Body != http.NoBody {
		body = newReplayBody(req.Body, p.cfg.ReplayLimit)
	}
	var tried []*endpoint
	var err error
	for len(tried) < p.cfg.MaxAttempts {
		ep := p.pick(tried)
		if ep == nil {
			break
		}
		tried = append(tried, ep)
		t0 := p.now()
		var res *http.Response
		if res, err = p.attempt(req, ep, body); err == nil {
			res.Body = &responseBody{ReadCloser: res.Body, p: p, ep: ep, res: res, req: req,
				start: start, t0: t0, attempts: len(tried)}
			return res, nil
		}
		refused := isRefused(err)
		p.firstData(ep, t0, !refused)
		p.release(ep)
		if !refused || req.Context().Err() != nil {
			break
		}
	}
	if len(tried) == 0 {
		return nil, &routeError{start: start}
	}
	return nil, &routeError{ep: tried[len(tried)-1], attempts: len(tried), start: start, err: err}
}

// attempt sends req to ep with a fresh view of the body.
func (p *Proxy) attempt(req *http.Request, ep *endpoint, body *replayBody) (*http.Response, error) {
	out := new(http.Request)
	*out = *req
	u := *req.URL
	u.Host = ep.host
	out.URL = &u
	if body != nil {
		rc, err := body.next()
		if err != nil {
			return nil, err
		}
		out.Body, out.GetBody = rc, body.next
	}
	return ep.tr.RoundTrip(out)
}

// isRefused reports whether err means the request never left the proxy: the
// connect failed, or the transport had no connection for it.
func isRefused(err error) bool {
	var de *dialError
	if errors.As(err, &de) {
		return true
	}
	var nc interface{ IsHTTP2NoCachedConnError() }
	return errors.As(err, &nc)
}

// pick returns an acquired endpoint from the current table that is not in
// tried, or nil if there is none.
func (p *Proxy) pick(tried []*endpoint) *endpoint {
	for range 16 { // acquire fails only when a sync retired the endpoint
		eps := p.table.Load().eps
		if len(tried) > 0 {
			eps = slices.DeleteFunc(slices.Clone(eps), func(ep *endpoint) bool { return slices.Contains(tried, ep) })
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

// fail is the ReverseProxy's ErrorHandler: the request got no response, so
// the client gets a Trailers-Only gRPC status, UNAVAILABLE (CANCELLED if the
// client itself gave up).
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	c := Call{Method: r.URL.Path, Code: codes.Unavailable}
	var re *routeError
	if errors.As(err, &re) {
		c.Attempts, c.Duration = re.attempts, p.now()-re.start
		if re.ep != nil {
			c.Endpoint, c.Pod = re.ep.addr, re.ep.pod
		}
	}
	msg := err.Error()
	if r.Context().Err() != nil {
		c.Code, msg = codes.Canceled, "client canceled the call"
	}
	writeStatus(w, r, c.Code, msg)
	if p.obs != nil {
		p.obs.Call(c)
	}
}

// responseBody follows one response to its end for the endpoint's load
// figures and the Observer. An upstream failure after the headers becomes
// UNAVAILABLE in the trailers instead of a stream reset. The ReverseProxy
// reads and closes it from the request goroutine only.
type responseBody struct {
	io.ReadCloser
	p         *Proxy
	ep        *endpoint
	res       *http.Response
	req       *http.Request
	start, t0 time.Duration
	attempts  int
	data      bool // first response data seen
	done      bool
	eof       bool
}

func (b *responseBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if n > 0 && !b.data {
		b.data = true
		b.p.firstData(b.ep, b.t0, true)
	}
	if err == nil {
		return n, nil
	}
	if err != io.EOF && b.req.Context().Err() == nil {
		b.upstreamFailed(err)
	}
	b.eof = true
	b.finish()
	return n, io.EOF
}

// upstreamFailed puts an UNAVAILABLE status into the trailers the proxy
// sends, unless the pod already sent its own.
func (b *responseBody) upstreamFailed(err error) {
	if _, ok := grpcStatus(b.res.Trailer); ok {
		return
	}
	if b.res.Trailer == nil {
		b.res.Trailer = http.Header{}
	}
	b.res.Trailer.Set("Grpc-Status", "14")
	b.res.Trailer.Set("Grpc-Message", encodeMessage("upstream reset after headers: "+err.Error()))
}

func (b *responseBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// finish settles the request's accounting once: pending and active counts,
// the EWMA sample of a response without data, and the Observer's Call.
func (b *responseBody) finish() {
	if b.done {
		return
	}
	b.done = true
	p := b.p
	if !b.data {
		p.firstData(b.ep, b.t0, true)
	}
	p.release(b.ep)
	if p.obs == nil {
		return
	}
	code := responseCode(b.res)
	if !b.eof || b.req.Context().Err() != nil {
		code = codes.Canceled
	}
	p.obs.Call(Call{Method: b.req.URL.Path, Endpoint: b.ep.addr, Pod: b.ep.pod, Attempts: b.attempts,
		Duration: p.now() - b.start, Code: code})
}
