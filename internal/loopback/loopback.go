// Package loopback enforces pinlab's network-safety rule: every socket the
// lab opens, listening or dialling, stays inside 127.0.0.0/8. DNS answers may
// name any address; traffic may not go there.
package loopback

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Prefix is the only network the lab sends traffic to or listens on.
var Prefix = netip.MustParsePrefix("127.0.0.0/8")

// CheckAddr returns an error unless hostport is an IP:port inside Prefix.
// Host names are refused: callers resolve first, so the check sees the
// address traffic would really go to.
func CheckAddr(hostport string) error {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return fmt.Errorf("loopback: %q is not an IP:port: %w", hostport, err)
	}
	return CheckIP(ap.Addr())
}

// CheckIP returns an error unless ip is inside Prefix.
func CheckIP(ip netip.Addr) error {
	if !Prefix.Contains(ip.Unmap()) {
		return fmt.Errorf("loopback: refusing %s: pinlab only uses %s", ip, Prefix)
	}
	return nil
}

// Dialer dials TCP only to addresses inside Prefix, optionally from a fixed
// source address (as a pod dials from its pod IP). The zero value dials from
// the kernel's choice of source with no timeout beyond ctx.
type Dialer struct {
	// Source is the local IP to dial from; the zero Addr lets the kernel choose.
	Source netip.Addr
	// Timeout bounds the connect; zero means no limit beyond ctx.
	Timeout time.Duration
}

// DialContext connects to addr ("IP:port") over TCP after checking that addr
// is inside Prefix. It never resolves names.
func (d Dialer) DialContext(ctx context.Context, addr string) (net.Conn, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	nd := net.Dialer{Timeout: d.Timeout}
	if d.Source.IsValid() {
		if err := CheckIP(d.Source); err != nil {
			return nil, err
		}
		nd.LocalAddr = &net.TCPAddr{IP: d.Source.AsSlice()}
		nd.Control = bindNoPort
	}
	return nd.DialContext(ctx, "tcp", addr)
}

// Listen opens a TCP listener on addr after checking it is inside Prefix.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// ListenPacket opens a UDP socket on addr after checking it is inside Prefix.
func ListenPacket(ctx context.Context, addr string) (net.PacketConn, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	return lc.ListenPacket(ctx, "udp", addr)
}

// AddrPort returns a socket address as an unmapped netip.AddrPort (the
// zero value for nil), for keying connections by peer.
func AddrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	if t, ok := a.(*net.TCPAddr); ok {
		ap = t.AddrPort()
	} else if a != nil {
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
