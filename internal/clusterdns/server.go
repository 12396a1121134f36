package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"k8s.io/client-go/informers"

	"github.com/pinlab/pinlab/internal/loopback"
)

// The search for a port free for both UDP and TCP: how many tries, and the
// range of the random ports tried after the kernel's choice.
const (
	freePortTries   = 20
	fallbackPortMin = 20000
	fallbackPortMax = 32767
)

// Server is the cluster DNS server: a dns.Handler over informer caches
// (ServeDNS) and, once started, UDP and TCP listeners on one address.
type Server struct {
	cfg    settings
	store  *store
	memo   answerMemo
	plugin *pluginCache                 // CoreDNS's cache plugin; nil without Config.Cache
	soas   [3]atomic.Pointer[cachedSOA] // by zoneKind

	randMu sync.Mutex // serialises Config.Rand

	mu   sync.Mutex // guards the fields below
	udp  *dns.Server
	tcp  *dns.Server
	addr string
	wg   sync.WaitGroup // the two serving goroutines
}

// New returns a Server reading from factory. It registers the Service,
// EndpointSlice and Namespace informers with factory, and the Pod informer
// if Config.Pods is PodsVerified, and adds indexes to them: by Service
// name and ready address for EndpointSlices, by ClusterIP for Services,
// by IP for Pods, and one per Server that tracks changes. The caller
// starts the factory, and until its caches have synced ServeDNS answers
// SERVFAIL. New fails if cfg is invalid or an informer has already been
// stopped.
func New(factory informers.SharedInformerFactory, cfg Config) (*Server, error) {
	if factory == nil {
		return nil, errors.New("clusterdns: nil informer factory")
	}
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	store, err := newStore(factory, st.pods == PodsVerified)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: st, store: store, plugin: newPluginCache(st.cache)}, nil
}

// Start binds UDP and TCP on Config.Addr (or a fallback port, see Config)
// and serves until Shutdown. It returns once both listeners are serving.
// Starting a started Server is an error.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.udp != nil {
		return errors.New("clusterdns: already started")
	}
	pc, ln, err := s.listen(ctx)
	if err != nil {
		return err
	}
	udp := &dns.Server{PacketConn: pc, Handler: listenerHandler{s}, UDPSize: dns.MaxMsgSize}
	tcp := &dns.Server{Listener: &capListener{Listener: ln, max: maxTCPConns}, Handler: listenerHandler{s}, MaxTCPQueries: -1,
		ReadTimeout: tcpReadTimeout, IdleTimeout: func() time.Duration { return tcpIdleTimeout }}
	if err := s.serve(ctx, udp, tcp); err != nil {
		pc.Close()
		ln.Close()
		s.wg.Wait()
		return err
	}
	s.udp, s.tcp, s.addr = udp, tcp, ln.Addr().String()
	return nil
}

// serve runs the servers and waits until each has started. On failure it
// shuts down those that did; the caller closes the sockets and waits.
func (s *Server) serve(ctx context.Context, servers ...*dns.Server) error {
	started := make(chan struct{}, len(servers))
	failed := make(chan error, len(servers))
	for _, srv := range servers {
		srv.NotifyStartedFunc = func() { started <- struct{}{} }
		s.wg.Go(func() {
			if err := srv.ActivateAndServe(); err != nil {
				failed <- err
			}
		})
	}
	var err error
	for n := 0; n < len(servers) && err == nil; n++ {
		select {
		case <-started:
		case e := <-failed:
			err = fmt.Errorf("clusterdns: serve: %w", e)
		case <-ctx.Done():
			err = fmt.Errorf("clusterdns: start: %w", ctx.Err())
		}
	}
	if err != nil {
		for _, srv := range servers {
			srv.Shutdown() // errors for servers that never started
		}
	}
	return err
}

// listen binds the configured address, falling back to a free port on the
// same IP if the port is denied or taken.
func (s *Server) listen(ctx context.Context) (net.PacketConn, net.Listener, error) {
	want := s.cfg.addr
	if want.Port() == 0 {
		return listenFreePort(ctx, want.Addr())
	}
	pc, ln, err := listenPair(ctx, want)
	if err == nil || !isBindRefused(err) {
		return pc, ln, err
	}
	pc, ln, err2 := listenFreePort(ctx, want.Addr())
	if err2 != nil {
		return nil, nil, errors.Join(err, err2)
	}
	s.cfg.log.Warn("port unavailable, serving DNS on another port",
		"want", want.String(), "addr", ln.Addr().String(), "err", err)
	return pc, ln, nil
}

// listenPair binds TCP and then UDP on ap; port 0 binds UDP on the port
// the kernel chose for TCP.
func listenPair(ctx context.Context, ap netip.AddrPort) (net.PacketConn, net.Listener, error) {
	ln, err := loopback.Listen(ctx, ap.String())
	if err != nil {
		return nil, nil, fmt.Errorf("clusterdns: listen tcp: %w", err)
	}
	ap = netip.AddrPortFrom(ap.Addr(), uint16(ln.Addr().(*net.TCPAddr).Port))
	pc, err := loopback.ListenPacket(ctx, ap.String())
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("clusterdns: listen udp: %w", err)
	}
	if u, ok := pc.(*net.UDPConn); ok {
		u.SetReadBuffer(udpReadBuffer) // best effort: the kernel caps it at net.core.rmem_max
	}
	return pc, ln, nil
}

// udpReadBuffer is the UDP socket's receive buffer. A lab's clients all
// start on one machine at the same instant, a burst a real cluster's
// network spreads out: with the kernel's default (net.core.rmem_default,
// 208 KiB here) 500 clients starting together lost 30 of their 500 A
// queries to a full socket (Udp RcvbufErrors) and connected 5 s late, at
// their resolver's retry.
const udpReadBuffer = 4 << 20

// listenFreePort binds TCP on a free port of ip, then UDP on the same
// port, retrying while either is taken. The first try takes the kernel's
// choice; later ones take a random port below the usual ephemeral range,
// which many short client connections (a load test) can use up.
func listenFreePort(ctx context.Context, ip netip.Addr) (net.PacketConn, net.Listener, error) {
	var err error
	for try := range freePortTries {
		var port uint16
		if try > 0 {
			port = fallbackPortMin + uint16(rand.IntN(fallbackPortMax-fallbackPortMin+1))
		}
		var pc net.PacketConn
		var ln net.Listener
		pc, ln, err = listenPair(ctx, netip.AddrPortFrom(ip, port))
		if err == nil {
			return pc, ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, nil, fmt.Errorf("clusterdns: no port free for both UDP and TCP on %s: %w", ip, err)
}

// isBindRefused reports whether a bind failed for lack of permission or
// because the port is in use: the cases where Start picks another port.
func isBindRefused(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) ||
		errors.Is(err, syscall.EADDRINUSE)
}

// Addr returns the "IP:port" the Server is bound to for both UDP and TCP,
// or "" if it is not started.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Shutdown stops both listeners, waiting for in-flight queries and the
// serving goroutines until ctx ends. Shutting down a Server that is not
// started does nothing. The Server may be started again afterwards.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.udp == nil {
		return nil
	}
	err := errors.Join(s.udp.ShutdownContext(ctx), s.tcp.ShutdownContext(ctx))
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	s.udp, s.tcp, s.addr = nil, nil, ""
	if err != nil {
		return fmt.Errorf("clusterdns: shutdown: %w", err)
	}
	return nil
}
