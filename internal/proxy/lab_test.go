package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
)

const (
	ns       = "shop"
	deadline = 10 * time.Second
)

// lab is one Proxier fed by a fake API, running until the test ends.
type lab struct {
	t      testing.TB
	api    *labtest.API
	p      *Proxier
	events chan connEvent
	stop   func() error // ends Run and returns its error; idempotent
}

type connEvent struct {
	c Conn
	e ConnEvent
}

// newLab starts a Proxier and its informers; cleanup stops both and checks
// that Run returned nil. Each setup function is called on the Proxier before
// Run starts (to replace its clock, say).
func newLab(t testing.TB, cfg Config, setup ...func(*Proxier)) *lab {
	t.Helper()
	l := &lab{t: t, api: labtest.NewAPI(t), events: make(chan connEvent, 1<<14)}
	cfg.OnConn = func(c Conn, e ConnEvent) {
		select {
		case l.events <- connEvent{c, e}:
		default:
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = labtest.Logger(t)
	}
	l.p = New(l.api.Factory, cfg)
	for _, f := range setup {
		f(l.p)
	}
	l.stop = labtest.Run(t, l.p.Run)
	l.api.Start()
	t.Cleanup(func() {
		if err := l.stop(); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	return l
}

// ctx returns a context that ends after the test's wait deadline.
func (l *lab) ctx() context.Context { return labtest.Context(l.t, deadline) }

// service creates a ClusterIP Service (clusterIP "None" makes it headless).
func (l *lab) service(name, clusterIP string, ports ...v1.ServicePort) {
	l.t.Helper()
	l.api.ApplyService(labtest.Service(ns, name, clusterIP, ports...))
}

// slice creates or replaces an IPv4 EndpointSlice of Service svc.
func (l *lab) slice(name, svc string, ports []discovery.EndpointPort, eps ...discovery.Endpoint) {
	l.t.Helper()
	l.api.ApplySlice(labtest.Slice(ns, name, svc, ports, eps...))
}

// endpoint is b's entry in an EndpointSlice, with conditions c.
func endpoint(b *backend, c discovery.EndpointConditions) discovery.Endpoint {
	return labtest.Endpoint(ns, b.name, b.addr.Addr(), c)
}

// waitRule waits until the rule for vip satisfies cond (nil rule: absent).
func (l *lab) waitRule(vip string, cond func(r *Rule) bool) {
	l.t.Helper()
	ap := netip.MustParseAddrPort(vip)
	err := l.p.Wait(l.ctx(), func(rules []Rule) bool {
		r, ok := findRule(rules, ap)
		if !ok {
			return cond(nil)
		}
		return cond(&r)
	})
	if err != nil {
		l.t.Fatalf("rule for %s: %v; rules now %+v", vip, err, l.p.Rules())
	}
}

// waitEndpoints waits until vip's eligible endpoints are exactly bs.
func (l *lab) waitEndpoints(vip string, bs ...*backend) {
	l.t.Helper()
	var want []netip.AddrPort
	for _, b := range bs {
		want = append(want, b.addr)
	}
	l.waitRule(vip, func(r *Rule) bool {
		var got []netip.AddrPort
		if r != nil {
			for _, e := range r.Endpoints {
				got = append(got, e.Addr)
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want) && (r != nil && r.Listening) == (len(want) > 0)
	})
}

func (l *lab) waitListening(vip string) {
	l.t.Helper()
	if err := l.p.WaitListening(l.ctx(), vip); err != nil {
		l.t.Fatalf("WaitListening(%s): %v", vip, err)
	}
}

// visit opens a connection from source to vip, does one round trip, closes
// it and waits until the proxy has finished the connection too (so any
// affinity hold is released), returning the backend that answered.
func (l *lab) visit(vip, source string) string {
	l.t.Helper()
	c, err := dial(vip, source)
	if err != nil {
		l.t.Fatalf("dial %s from %s: %v", vip, source, err)
	}
	name := c.mustAsk(l.t, "hello")
	addr := c.LocalAddr()
	c.Close()
	l.waitClosed(addr)
	return name
}

// waitClosed waits for the ConnClosed event of the connection from client.
func (l *lab) waitClosed(client net.Addr) Conn {
	l.t.Helper()
	want := addrPort(client)
	timeout := time.After(deadline)
	for {
		select {
		case ev := <-l.events:
			if ev.e == ConnClosed && ev.c.Client == want {
				return ev.c
			}
		case <-timeout:
			l.t.Fatalf("no ConnClosed event for %v", want)
		}
	}
}

// backend is a stand-in pod: a TCP server that answers each line with
// "<name> <line>", says "<name> bye" when the client half-closes, and records
// the source address of every connection it accepts.
type backend struct {
	name string
	addr netip.AddrPort
	ln   net.Listener
	wg   sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]bool
	remotes []netip.AddrPort
}

// startBackends starts one backend per IP, all on the same free port (an
// EndpointSlice port applies to every endpoint of the slice). Names are
// "pod-" + the IP's last octet.
func startBackends(t testing.TB, ips ...string) []*backend {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		bs, err := listenAll(t, ips)
		if err == nil {
			return bs
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
	}
	t.Fatal("no common free port for backends")
	return nil
}

func listenAll(t testing.TB, ips []string) ([]*backend, error) {
	var bs []*backend
	port := "0"
	for _, ip := range ips {
		ln, err := loopback.Listen(context.Background(), net.JoinHostPort(ip, port))
		if err != nil {
			for _, b := range bs {
				b.ln.Close()
				b.wg.Wait()
			}
			return nil, err
		}
		b := &backend{name: "pod-" + ip[strings.LastIndexByte(ip, '.')+1:], ln: ln, conns: map[net.Conn]bool{}}
		b.addr = addrPort(ln.Addr())
		port = fmt.Sprint(b.addr.Port())
		b.wg.Go(b.serve)
		bs = append(bs, b)
	}
	for _, b := range bs {
		t.Cleanup(b.stop)
	}
	return bs, nil
}

func (b *backend) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns[c] = true
		b.remotes = append(b.remotes, addrPort(c.RemoteAddr()))
		b.mu.Unlock()
		b.wg.Go(func() { b.answer(c) })
	}
}

func (b *backend) answer(c net.Conn) {
	defer func() {
		c.Close()
		b.mu.Lock()
		delete(b.conns, c)
		b.mu.Unlock()
	}()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			fmt.Fprintf(c, "%s bye\n", b.name)
			return
		}
		if _, err := fmt.Fprintf(c, "%s %s", b.name, line); err != nil {
			return
		}
	}
}

func (b *backend) stop() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *backend) remoteIPs() []netip.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ips []netip.Addr
	for _, r := range b.remotes {
		ips = append(ips, r.Addr())
	}
	return ips
}

// client is a line-oriented connection to a VIP.
type client struct {
	*net.TCPConn
	r *bufio.Reader
}

// dial connects to addr from source (zero: kernel's choice).
func dial(addr, source string) (*client, error) {
	d := loopback.Dialer{Timeout: deadline}
	if source != "" {
		d.Source = netip.MustParseAddr(source)
	}
	c, err := d.DialContext(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(deadline))
	return &client{c.(*net.TCPConn), bufio.NewReader(c)}, nil
}

func mustDial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := dial(addr, "")
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ask sends msg and returns the name of the backend that answered.
func (c *client) ask(msg string) (string, error) {
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	name, got, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if got != msg {
		return "", fmt.Errorf("backend %s echoed %q, want %q", name, got, msg)
	}
	return name, nil
}

func (c *client) mustAsk(t testing.TB, msg string) string {
	t.Helper()
	name, err := c.ask(msg)
	if err != nil {
		t.Fatalf("round trip %q: %v", msg, err)
	}
	return name
}

// once opens a connection to vip from the kernel's choice of source, does one
// round trip and closes it, returning the backend that answered.
func once(vip string) (string, error) { return onceFrom(vip, "") }

// onceFrom is once from source. Every connection leaves two sockets in
// TIME_WAIT on the source IP (client and proxy-to-pod, the proxy dialling
// from the client's IP), so tests with many connections spread them over
// several source IPs to stay far from the ~28k ephemeral ports per IP.
func onceFrom(vip, source string) (string, error) {
	c, err := dial(vip, source)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ask("hello")
}
