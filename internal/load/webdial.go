package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc/codes"
)

// target is a parsed client URL: "http://host:port" with nothing after the
// port but an optional "/".
type target struct {
	base string // scheme://host:port, no trailing slash
	host string
	ip   netip.Addr // valid when host is an IP
}

func parseTarget(raw, dns string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return target{}, fmt.Errorf("url %q: want http://host:port", raw)
	}
	t := target{base: "http://" + u.Host, host: u.Hostname()}
	if ip, err := netip.ParseAddr(t.host); err == nil {
		if err := loopback.CheckIP(ip); err != nil {
			return target{}, fmt.Errorf("url: %w", err)
		}
		t.ip = ip
		return t, nil
	}
	if dns == "" {
		return target{}, fmt.Errorf("url host %q is a name: set DNS to resolve it", t.host)
	}
	return t, nil
}

// dialer opens TCP connections from a source IP to IP:port addresses
// inside 127.0.0.0/8, resolving host names through one DNS server, and
// tells an Observer about each connection. Safe for concurrent use.
type dialer struct {
	d   loopback.Dialer
	res *net.Resolver // nil: names are refused
	obs Observer
}

// newDialer checks source and dns ("IP:port" in 127.0.0.0/8 or empty) and
// returns a dialer whose connects each take at most timeout.
func newDialer(source netip.Addr, dns string, timeout time.Duration, obs Observer) (*dialer, error) {
	if err := loopback.CheckIP(source); err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	d := &dialer{d: loopback.Dialer{Source: source, Timeout: timeout}, obs: obs}
	if dns == "" {
		return d, nil
	}
	if err := loopback.CheckAddr(dns); err != nil {
		return nil, fmt.Errorf("dns: %w", err)
	}
	d.res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialDNS(ctx, network, source, dns)
	}}
	return d, nil
}

// dialDNS connects to the DNS server from source, over UDP or TCP as Go's
// resolver asks (TCP after a truncated UDP answer).
func dialDNS(ctx context.Context, network string, source netip.Addr, server string) (net.Conn, error) {
	var nd net.Dialer
	switch network {
	case "udp", "udp4":
		nd.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(source, 0))
	case "tcp", "tcp4":
		return loopback.Dialer{Source: source}.DialContext(ctx, server)
	default:
		return nil, fmt.Errorf("dns over %s not supported", network)
	}
	return nd.DialContext(ctx, network, server)
}

// DialContext has net/http's Transport.DialContext shape. addr is
// "host:port"; a host name is resolved (A records only) on every call.
func (d *dialer) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portStr, err)
	}
	ips, err := d.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		c, err := d.d.DialContext(ctx, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return d.observe(c), nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (d *dialer) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	if d.res == nil {
		return nil, fmt.Errorf("host %q is a name and no DNS server is set", host)
	}
	ips, err := d.res.LookupNetIP(ctx, "ip4", host)
	if err != nil {
		return nil, err
	}
	for i, ip := range ips {
		ips[i] = ip.Unmap()
	}
	return ips, nil
}

func (d *dialer) observe(c net.Conn) net.Conn {
	oc := &observedConn{Conn: c, obs: d.obs, remote: loopback.AddrPort(c.RemoteAddr())}
	d.obs.Conn(ConnEvent{Remote: oc.remote, Open: true})
	return oc
}

// observedConn reports its first Close to the Observer, with the reason of
// the first failed read before it (ReadCloseReason: the server closed
// or reset it), else ReasonClient. Without HTTP/2 there is no GOAWAY
// to see.
type observedConn struct {
	net.Conn
	obs    Observer
	remote netip.AddrPort
	once   sync.Once

	mu      sync.Mutex
	readEnd CloseReason // the first failed read's; "" if none
}

func (c *observedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		if r, ok := ReadCloseReason(err); ok {
			c.mu.Lock()
			if c.readEnd == "" {
				c.readEnd = r
			}
			c.mu.Unlock()
		}
	}
	return n, err
}

func (c *observedConn) Close() error {
	c.mu.Lock()
	reason := c.readEnd
	c.mu.Unlock()
	if reason == "" {
		reason = ReasonClient
	}
	err := c.Conn.Close()
	c.once.Do(func() { c.obs.Conn(ConnEvent{Remote: c.remote, Reason: reason}) })
	return err
}

// errCode maps a client-side failure without an HTTP status to a code as
// grpc-go would report it: deadlines DeadlineExceeded, cancellation
// Canceled, everything else (refused, reset, no DNS answer) Unavailable.
func errCode(err error) codes.Code {
	var ne net.Error
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unavailable
}
