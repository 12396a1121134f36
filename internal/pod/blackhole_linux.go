package pod

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"golang.org/x/sys/unix"
)

// Blackhole makes one TCP address drop SYNs, so connects to it time out
// instead of being refused, as they do to a pod IP that is no longer routed
// or a process that no longer accepts. It needs no privileges:
//
//   - a socket is bound to the address and put in the listening state with
//     backlog 0 (listen(2) directly, since Go's net package always asks for
//     net.core.somaxconn);
//   - one connection is dialled to it and left in the accept queue, which is
//     never accepted: with backlog 0 Linux queues exactly one connection;
//   - with the accept queue full, the kernel drops every further SYN (it
//     counts ListenOverflows) rather than answering it, so the client
//     retransmits its SYN until its own connect timeout. That holds as long
//     as net.ipv4.tcp_abort_on_overflow is 0 (the default); with 1 the
//     kernel answers RST and connects are refused instead. SYN cookies do
//     not change it: a full accept queue drops SYNs before cookies apply.
//
// Verified on Linux 6.x as root and as an unprivileged user: a dial with a
// 300 ms timeout ends in an i/o timeout after 300 ms, where an address
// nothing listens on gives ECONNREFUSED at once (TestBlackholeTimesOut).
// A Blackhole holds two sockets and one kernel listening socket; Close
// frees them.
type Blackhole struct {
	fd   int
	fill net.Conn
	once sync.Once
}

// NewBlackhole drops SYNs to addr, an IPv4 address inside a range package
// loopback allows, with a non-zero port, until Close. With a
// ContainerNetns (a real cluster's container) any IPv4 address is taken,
// and an unspecified one, IPv4 or IPv6 (Go listens on "0.0.0.0:N" as on
// "[::]:N"), blackholes the port on every address of the pod, both
// families (a dual-stack socket). The address must be free (nothing
// listening on it); connections already established to it are
// unaffected. Errors say which step failed. With ns (a pod's own network
// namespace; nil: the node's) the listening socket is made there.
func NewBlackhole(ctx context.Context, addr netip.AddrPort, ns Netns) (*Blackhole, error) {
	_, inContainer := ns.(ContainerNetns)
	wildcard := inContainer && addr.Addr().IsUnspecified()
	if !inContainer {
		if err := loopback.CheckIP(addr.Addr()); err != nil {
			return nil, err
		}
	}
	if (!addr.Addr().Unmap().Is4() && !wildcard) || addr.Port() == 0 {
		return nil, fmt.Errorf("pod: blackhole %v: want an IPv4 address with a port", addr)
	}
	family := unix.AF_INET
	if wildcard {
		family = unix.AF_INET6
	}
	var fd int
	socket := func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	}
	var err error
	if ns == nil {
		err = socket()
	} else {
		err = ns.Do(socket)
	}
	if err != nil {
		return nil, fmt.Errorf("pod: blackhole %v: socket: %w", addr, err)
	}
	b := &Blackhole{fd: fd}
	if err := b.listen(addr, wildcard); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pod: blackhole %v: %w", addr, err)
	}
	fill, err := fillDial(ctx, fillAddr(addr), inContainer)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pod: blackhole %v: filling the accept queue: %w", addr, err)
	}
	b.fill = fill
	return b, nil
}

// fillAddr is where the connection that fills a blackhole's accept queue
// dials: addr, or 127.0.0.1 at its port when addr is unspecified (a
// ContainerNetns server listening on every address).
func fillAddr(addr netip.AddrPort) netip.AddrPort {
	if addr.Addr().IsUnspecified() {
		return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), addr.Port())
	}
	return addr
}

// fillDial connects to addr: through package loopback in the lab, as any
// dial in a container (the address is the pod's own).
func fillDial(ctx context.Context, addr netip.AddrPort, inContainer bool) (net.Conn, error) {
	if !inContainer {
		return loopback.Dialer{Timeout: time.Second}.DialContext(ctx, addr.String())
	}
	d := net.Dialer{Timeout: time.Second}
	return d.DialContext(ctx, "tcp", addr.String())
}

// listen binds the socket (SO_REUSEADDR, as Go's listeners, so connections
// of an earlier listener on the address do not block it), to [::] when
// wildcard, and listens with backlog 0.
func (b *Blackhole) listen(addr netip.AddrPort, wildcard bool) error {
	if err := unix.SetsockoptInt(b.fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	var sa unix.Sockaddr
	if wildcard { // [::] with IPv4 mapped in, as Go's own wildcard listeners
		if err := unix.SetsockoptInt(b.fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fmt.Errorf("IPV6_V6ONLY: %w", err)
		}
		sa = &unix.SockaddrInet6{Port: int(addr.Port())}
	} else {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().Unmap().As4()}
	}
	if err := unix.Bind(b.fd, sa); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(b.fd, 0); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return nil
}

// Close stops dropping SYNs: afterwards the address refuses connections
// until something listens on it again. Later calls do nothing.
func (b *Blackhole) Close() error {
	var err error
	b.once.Do(func() {
		err = errors.Join(b.fill.Close(), unix.Close(b.fd))
	})
	return err
}
