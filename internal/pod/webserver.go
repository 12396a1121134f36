package pod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/webapi"
)

// WebReadHeaderTimeout bounds how long a connection to a WebServer may
// take to send a request's headers.
const WebReadHeaderTimeout = 10 * time.Second

// WebConfig describes one pod's HTTP/1.1 and WebSocket server. The zero
// value of each optional field works.
type WebConfig struct {
	// Name and Namespace identify the pod in replies.
	Name, Namespace string
	// Addr is the pod IP and port to listen on; it must be inside a range
	// package loopback allows. Port 0 picks a free port (see
	// WebServer.Addr).
	Addr netip.AddrPort
	// ServiceTime is how long each price request and WebSocket message
	// takes before its reply, standing in for the pod's work; zero answers
	// at once. A WebSocket's messages are served one after another.
	ServiceTime time.Duration
	// Observer, if not nil, is told about requests, messages and
	// connections; see WebServer.
	Observer Observer
	// Netns, if not nil, is the pod's own network namespace, where the
	// server listens; nil listens in the node's.
	Netns Netns
}

// WebServer is one pod's HTTP/1.1 and WebSocket workload, beside the gRPC
// Server in the same pod process: a net/http server speaking HTTP/1.1 only
// (no h2 or h2c), with the paths and JSON shapes of package webapi. Every
// reply names the pod that served it, and it reports to the same Observer
// as the gRPC server, so per-pod rates are counted alike. Start it once;
// Stop or Kill it once (Kill after Stop is allowed).
//
// The Observer gets Served(peer, route, code) once per finished HTTP
// request (route as in webapi's Route constants; code from webapi.CodeOf of
// the status written; a successful WebSocket upgrade is not a request: its
// messages are) and once per answered WebSocket message
// (codes.OK), and Conn(peer, open) when a TCP connection opens and when it
// closes (from http.Server's ConnState; a connection upgraded to a
// WebSocket is reported closed when the WebSocket ends). Calls come from
// net/http's connection goroutines, concurrently.
type WebServer struct {
	cfg  WebConfig
	obs  Observer
	http *http.Server
	mux  *http.ServeMux

	ln       net.Listener
	serveErr error
	serving  sync.WaitGroup // the Serve goroutine

	// base ends when the server is killed: WebSockets close at once and
	// ServiceTime waits end.
	base   context.Context
	cancel context.CancelFunc
	// draining is closed once Stop has closed the listener (an OnShutdown
	// hook of http.Server.Shutdown): WebSockets send 1001.
	draining  chan struct{}
	drainOnce sync.Once

	mu       sync.Mutex     // guards stopping, closed and Adds to active
	stopping bool           // Stop or Kill began: no new WebSockets, health 503
	closed   bool           // no new handlers at all
	active   sync.WaitGroup // running handlers, WebSockets included
}

// NewWebServer returns a server for cfg; nothing listens until Start.
func NewWebServer(cfg WebConfig) *WebServer {
	s := &WebServer{cfg: cfg, obs: cfg.Observer, mux: http.NewServeMux(), draining: make(chan struct{})}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.mux.HandleFunc(webapi.RoutePrice, s.price)
	s.mux.HandleFunc(webapi.RouteHealth, s.health)
	s.mux.HandleFunc(webapi.RouteWatch, s.watch)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	s.http = &http.Server{
		Handler:           s,
		Protocols:         &protocols,
		ReadHeaderTimeout: WebReadHeaderTimeout,
		ConnState:         s.connState,
		BaseContext:       func(net.Listener) context.Context { return s.base },
	}
	s.http.RegisterOnShutdown(func() { s.drainOnce.Do(func() { close(s.draining) }) })
	return s
}

// Start listens on cfg.Addr and serves in a background goroutine owned by
// s. It returns once the listener is bound; ctx bounds only the bind.
func (s *WebServer) Start(ctx context.Context) error {
	if s.ln != nil {
		return fmt.Errorf("pod: %s: web server: already started", s.cfg.Name)
	}
	ln, err := listenIn(ctx, s.cfg.Netns, s.cfg.Addr.String())
	if err != nil {
		return fmt.Errorf("pod: %s: web server: %w", s.cfg.Name, err)
	}
	s.ln = ln
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	return nil
}

// Addr returns the bound address once Start succeeded; the zero AddrPort
// before.
func (s *WebServer) Addr() netip.AddrPort {
	if s.ln == nil {
		return netip.AddrPort{}
	}
	return loopback.AddrPort(s.ln.Addr())
}

// Stop shuts down gracefully as a pod does on SIGTERM with
// http.Server.Shutdown: /healthz turns 503 and new WebSocket upgrades get
// 503, the listener closes, then every WebSocket gets a close frame 1001
// (going away; Shutdown's OnShutdown hooks run after it closes the
// listeners) and ends when the client answers it, idle keep-alive
// connections close, and requests in flight finish (their responses carry
// "Connection: close"). When ctx ends first (the termination grace
// period), what remains is closed hard. Stop blocks until every handler has
// returned; it returns an error only if serving failed.
func (s *WebServer) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if err := s.http.Shutdown(ctx); err != nil {
		s.http.Close()
	}
	done := s.closeHandlers()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		<-done
	}
	s.cancel()
	s.serving.Wait()
	return s.serveErr
}

// Kill stops at once: the listener and every connection, WebSockets
// included, close without a close frame, and requests in flight fail, as
// when the grace period is zero. It blocks until every handler has
// returned.
func (s *WebServer) Kill() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.cancel()
	s.http.Close()
	<-s.closeHandlers()
	s.serving.Wait()
}

// closeHandlers refuses new handlers and returns a channel closed once the
// running ones have returned. Its goroutine ends with them; Kill and a
// Stop past its deadline bound that time by cancelling s.base.
func (s *WebServer) closeHandlers() <-chan struct{} {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.active.Wait()
		close(done)
	}()
	return done
}

// enter counts a handler in; false once the server no longer takes any.
func (s *WebServer) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active.Add(1)
	return true
}

func (s *WebServer) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// ServeHTTP routes r and reports it to the Observer.
func (s *WebServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	peer := peerOf(r)
	sw := &statusWriter{ResponseWriter: w}
	h, route := s.mux.Handler(r)
	if route == "" {
		route = webapi.RouteUnmatched
	}
	if !s.enter() {
		s.fail(sw, http.StatusServiceUnavailable, "pod stopping")
	} else {
		defer s.active.Done()
		h.ServeHTTP(sw, r)
	}
	if sw.status == http.StatusSwitchingProtocols {
		return
	}
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	s.obs.Served(peer, route, webapi.CodeOf(sw.status))
}

func (s *WebServer) price(w http.ResponseWriter, r *http.Request) {
	sku := r.URL.Query().Get("sku")
	if sku == "" {
		s.fail(w, http.StatusBadRequest, "missing query parameter sku")
		return
	}
	if err := s.work(r.Context()); err != nil {
		if s.base.Err() != nil {
			s.fail(w, http.StatusServiceUnavailable, "pod killed")
		} else {
			s.fail(w, 499, "client closed request")
		}
		return
	}
	s.reply(w, http.StatusOK, s.quote(sku, 0))
}

func (s *WebServer) health(w http.ResponseWriter, _ *http.Request) {
	if s.isStopping() {
		s.fail(w, http.StatusServiceUnavailable, "pod stopping")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// work waits ServiceTime, or until ctx or the server's base context ends.
func (s *WebServer) work(ctx context.Context) error {
	if s.cfg.ServiceTime <= 0 {
		return nil
	}
	t := time.NewTimer(s.cfg.ServiceTime)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.base.Done():
		return s.base.Err()
	}
}

func (s *WebServer) quote(sku string, id int64) webapi.Quote {
	return webapi.Quote{
		ID:         id,
		Pod:        s.cfg.Name,
		PodIP:      s.cfg.Addr.Addr().String(),
		Namespace:  s.cfg.Namespace,
		SKU:        sku,
		PriceCents: priceCents(sku),
	}
}

func (s *WebServer) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (s *WebServer) fail(w http.ResponseWriter, status int, msg string) {
	s.reply(w, status, webapi.ErrorReply{Error: msg, Pod: s.cfg.Name, PodIP: s.cfg.Addr.Addr().String()})
}

func (s *WebServer) connState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		s.obs.Conn(loopback.AddrPort(c.RemoteAddr()), true)
	case http.StateClosed:
		s.obs.Conn(loopback.AddrPort(c.RemoteAddr()), false)
	}
}

func peerOf(r *http.Request) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// statusWriter remembers the status written; Unwrap lets
// http.ResponseController and the WebSocket library reach the Hijacker.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
