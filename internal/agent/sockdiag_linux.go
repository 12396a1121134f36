//go:build linux

package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// dumpTries is how many times a sock_diag dump the kernel reports
// interrupted (its socket table changed during the dump) is tried.
const dumpTries = 3

// readSockDiag lists the TCP sockets of the calling thread's network
// namespace, IPv4 and IPv6, with their tcp_info, through sock_diag (as
// `ss -ti` does).
func readSockDiag() ([]socket, error) {
	// A netlink socket made here belongs to this thread's namespace, the
	// one Options.Do may have entered.
	h, err := netlink.NewHandle(unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("agent: sock_diag: %w", err)
	}
	defer h.Close()
	var out []socket
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		rs, err := h.SocketDiagTCPInfo(fam)
		for i := 1; i < dumpTries && errors.Is(err, netlink.ErrDumpInterrupted); i++ {
			rs, err = h.SocketDiagTCPInfo(fam)
		}
		if err != nil {
			return nil, fmt.Errorf("agent: sock_diag: %w", err)
		}
		for _, r := range rs {
			out = append(out, diagSocket(r))
		}
	}
	return out, nil
}

// diagSocket converts one sock_diag answer.
func diagSocket(r *netlink.InetDiagTCPInfoResp) socket {
	m := r.InetDiagMsg
	s := socket{
		// The kernel splits the 64-bit cookie low word first
		// (sock_diag_save_cookie); ss prints it the same way.
		id:     fmt.Sprintf("%016x", uint64(m.ID.Cookie[1])<<32|uint64(m.ID.Cookie[0])),
		local:  diagAddrPort(m.ID.Source, m.ID.SourcePort),
		remote: diagAddrPort(m.ID.Destination, m.ID.DestinationPort),
		state:  m.State,
	}
	if t := r.TCPInfo; t != nil {
		s.rx, s.tx, s.bytes = int64(t.Bytes_received), int64(t.Bytes_acked), true
	}
	return s
}

func diagAddrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return unmap(netip.AddrPortFrom(a, port))
}
