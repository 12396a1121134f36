// Package loopback enforces pinlab's network-safety rule: every socket the
// lab opens, listening or dialling, stays inside 127.0.0.0/8. DNS answers may
// name any address; traffic may not go there.
//
// The one exception is a private network namespace with no route out
// (package netns): there, after Allow has checked that the namespace has
// no way out (Sealed: lo, and the pod networks' bridges and veths), whole
// private ranges made local on lo are allowed too, because traffic to them
// cannot leave the namespace.
package loopback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Prefix is the network the lab may always send traffic to or listen on.
var Prefix = netip.MustParsePrefix("127.0.0.0/8")

// allowed holds the prefixes Allow added; guarded by allowedMu.
var (
	allowedMu sync.RWMutex
	allowed   []netip.Prefix
)

// PodBridgePrefix begins the name of every bridge a pod network of the
// real control plane tier makes (package podnet); Sealed allows those
// bridges and the veths on them.
const PodBridgePrefix = "pinlab"

// iface is a network interface: its name, its kind as the kernel reports
// it ("veth", "bridge"; "" when unknown) and the name of the bridge it is
// attached to ("" when none).
type iface struct{ name, kind, master string }

// interfaces lists the network interfaces; a test seam.
var interfaces = links

// Sealed returns nil when no route can lead out of this process's network
// namespace: it has no interface but lo and the pod networks' bridges
// (named PodBridgePrefix...) with the veths attached to them. A veth on
// no bridge is allowed too when such a bridge exists: the CNI bridge
// plugin makes each pod's veth that way for a moment before attaching it.
// It checks names, kinds and bridges, not where a veth's other end is:
// that it is in a pod's namespace with lo and that veth alone is what
// package podnet makes, assumed here. Otherwise the error names another
// interface, or says why they could not be listed.
func Sealed() error {
	ifs, err := interfaces()
	if err != nil {
		return fmt.Errorf("listing interfaces: %w", err)
	}
	bridge := false
	for _, i := range ifs {
		bridge = bridge || i.kind == "bridge" && strings.HasPrefix(i.name, PodBridgePrefix)
	}
	for _, i := range ifs {
		switch {
		case i.name == "lo":
		case i.kind == "bridge" && strings.HasPrefix(i.name, PodBridgePrefix):
		case i.kind == "veth" && strings.HasPrefix(i.master, PodBridgePrefix):
		case i.kind == "veth" && i.master == "" && bridge:
		default:
			return fmt.Errorf("interface %q exists", i.name)
		}
	}
	return nil
}

// Allow makes CheckIP (and so every dial and listen of this package)
// accept p as well as Prefix, for the rest of the process. It refuses
// unless the process's network namespace has no way out (Sealed), checked
// now: only then can traffic to p not leave the machine. p must be
// an IPv4 prefix inside the private ranges (10/8, 172.16/12, 192.168/16,
// 100.64/10). Package netns calls it after making p local on lo; nothing
// else should.
func Allow(p netip.Prefix) error {
	if err := checkPrivate(p); err != nil {
		return err
	}
	if err := Sealed(); err != nil {
		return fmt.Errorf("loopback: refusing to allow %s: %w, so traffic could leave; only a network namespace with no way out may use it", p, err)
	}
	allowedMu.Lock()
	defer allowedMu.Unlock()
	allowed = append(allowed, p.Masked())
	return nil
}

// privateRanges are the IPv4 ranges Allow accepts prefixes inside: RFC 1918
// and the shared address space of RFC 6598.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

// checkPrivate returns an error unless p is a valid IPv4 prefix inside one
// of privateRanges.
func checkPrivate(p netip.Prefix) error {
	if !p.IsValid() || !p.Addr().Is4() {
		return fmt.Errorf("loopback: refusing to allow %s: not an IPv4 prefix", p)
	}
	for _, r := range privateRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return nil
		}
	}
	return errors.New("loopback: refusing to allow " + p.String() + ": not inside a private range (10/8, 172.16/12, 192.168/16, 100.64/10)")
}

// Allowed returns Prefix and the prefixes Allow added.
func Allowed() []netip.Prefix {
	allowedMu.RLock()
	defer allowedMu.RUnlock()
	return append([]netip.Prefix{Prefix}, allowed...)
}

// CheckAddr returns an error unless hostport is an IP:port that CheckIP
// accepts.
// Host names are refused: callers resolve first, so the check sees the
// address traffic would really go to.
func CheckAddr(hostport string) error {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return fmt.Errorf("loopback: %q is not an IP:port: %w", hostport, err)
	}
	return CheckIP(ap.Addr())
}

// CheckIP returns an error unless ip is inside Prefix or a prefix Allow
// added.
func CheckIP(ip netip.Addr) error {
	ip = ip.Unmap()
	ok := Allowed()
	for _, p := range ok {
		if p.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("loopback: refusing %s: pinlab only uses %s", ip, joinPrefixes(ok))
}

// joinPrefixes lists ps as "a, b and c".
func joinPrefixes(ps []netip.Prefix) string {
	s := ps[0].String()
	for i, p := range ps[1:] {
		if i == len(ps)-2 {
			s += " and "
		} else {
			s += ", "
		}
		s += p.String()
	}
	return s
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
	return d.Dial(ctx, "tcp", addr)
}

// Dial is DialContext over network: "tcp", or "udp" (a connected UDP
// socket, as a DNS client's query uses). Other networks are refused.
func (d Dialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if network != "tcp" && network != "udp" {
		return nil, fmt.Errorf("loopback: network %q, want tcp or udp", network)
	}
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	nd := net.Dialer{Timeout: d.Timeout}
	if d.Source.IsValid() {
		if err := CheckIP(d.Source); err != nil {
			return nil, err
		}
		if network == "udp" {
			nd.LocalAddr = &net.UDPAddr{IP: d.Source.AsSlice()}
		} else {
			nd.LocalAddr = &net.TCPAddr{IP: d.Source.AsSlice()}
			nd.Control = bindNoPort
		}
	}
	return nd.DialContext(ctx, network, addr)
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
