package cachedns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/miekg/dns"
	"github.com/pinlab/pinlab/internal/loopback"
)

// udpSize is the EDNS0 UDP payload size queries advertise: 1232 bytes, the
// DNS Flag Day 2020 default of BIND and Unbound. Answers longer than that
// (about 70 A records) come truncated and are asked again over TCP.
const udpSize = 1232

// Target is a dns:// gRPC target split into its parts.
type Target struct {
	// Server is the DNS server (the target's authority); port 53 unless
	// given.
	Server netip.AddrPort
	// Host is the name to resolve, or an IP literal.
	Host string
	// Port is the port of the resolved addresses; 443 unless given, as in
	// grpc-go.
	Port uint16
}

// ParseTarget parses "dns://<server IP>[:port]/<host>[:port]". The server
// must be a loopback IP; host names are not allowed there because
// resolving them would need another DNS server.
func ParseTarget(target string) (Target, error) {
	u, err := url.Parse(target)
	if err != nil {
		return Target{}, fmt.Errorf("cachedns: target %q: %w", target, err)
	}
	if u.Scheme != Scheme {
		return Target{}, fmt.Errorf("cachedns: target %q: scheme %q, want %q", target, u.Scheme, Scheme)
	}
	return parse(u.Host, strings.TrimPrefix(u.Path, "/"))
}

func parse(authority, endpoint string) (Target, error) {
	var t Target
	if authority == "" {
		return t, fmt.Errorf("cachedns: target %q names no DNS server; want dns://<IP:port>/<host>:<port>", endpoint)
	}
	server, err := netip.ParseAddrPort(authority)
	if err != nil {
		ip, err2 := netip.ParseAddr(strings.Trim(authority, "[]"))
		if err2 != nil {
			return t, fmt.Errorf("cachedns: DNS server %q is not an IP[:port]", authority)
		}
		server = netip.AddrPortFrom(ip, 53)
	}
	if err := loopback.CheckIP(server.Addr()); err != nil {
		return t, fmt.Errorf("cachedns: DNS server: %w", err)
	}
	t.Server = server
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		host, port = strings.Trim(endpoint, "[]"), "443"
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if host == "" || err != nil {
		return t, fmt.Errorf("cachedns: endpoint %q, want <host>[:port] with a numeric port", endpoint)
	}
	t.Host, t.Port = host, uint16(p)
	return t, nil
}

// DialFunc opens the socket of a DNS query: network "udp" or "tcp", addr
// the server's "IP:port". Package loopback's Dialer.Dial is one.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Lookup asks server for host's A records, over UDP with EDNS0 and again
// over TCP if the answer comes back truncated, on sockets dial opens (nil:
// package loopback's Dialer, from the kernel's choice of source). ctx
// bounds the whole lookup. NXDOMAIN and an empty answer both return no
// addresses and no error (grpc-go's DNS resolver likewise turns a "not
// found" into an empty list); a timeout, a network error or another rcode
// is an error. An IP-literal host is returned as is.
func Lookup(ctx context.Context, server netip.AddrPort, dial DialFunc, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	if err := loopback.CheckIP(server.Addr()); err != nil {
		return nil, fmt.Errorf("cachedns: %w", err)
	}
	if dial == nil {
		dial = loopback.Dialer{}.Dial
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(host), dns.TypeA)
	q.SetEdns0(udpSize, false)
	r, err := exchange(ctx, dial, "udp", q, server)
	if err == nil && r.Truncated {
		r, err = exchange(ctx, dial, "tcp", q, server)
	}
	if err != nil {
		return nil, fmt.Errorf("cachedns: A record lookup error: %w", err)
	}
	switch r.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		return nil, fmt.Errorf("cachedns: A record lookup error: %s answered %s", server, dns.RcodeToString[r.Rcode])
	}
	var addrs []netip.Addr
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A); ok {
				addrs = append(addrs, ip.Unmap())
			}
		}
	}
	return addrs, nil
}

// exchange sends q to server over network on a socket of dial's and reads
// its answer.
func exchange(ctx context.Context, dial DialFunc, network string, q *dns.Msg, server netip.AddrPort) (*dns.Msg, error) {
	conn, err := dial(ctx, network, server.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := &dns.Client{Net: network, UDPSize: udpSize}
	r, _, err := c.ExchangeWithConnContext(ctx, q, &dns.Conn{Conn: conn})
	return r, err
}
