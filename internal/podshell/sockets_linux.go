//go:build linux

package podshell

import (
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// sockets lists the TCP and/or UDP sockets of the pod's namespace through
// the kernel's sock_diag (as ss(8) reads them), IPv4 and IPv6.
func (sh *shell) sockets(tcp, udp bool) ([]row, error) {
	var rows []row
	err := sh.in(func() error {
		// A netlink socket made here belongs to this thread's namespace.
		h, err := netlink.NewHandle(unix.NETLINK_SOCK_DIAG)
		if err != nil {
			return err
		}
		defer h.Close()
		add := func(proto string, ss []*netlink.Socket) {
			for _, s := range ss {
				rows = append(rows, row{proto: proto, state: s.State, rq: s.RQueue, wq: s.WQueue,
					local: s.ID.Source, lport: s.ID.SourcePort, peer: s.ID.Destination, pport: s.ID.DestinationPort})
			}
		}
		for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
			if tcp {
				ss, err := h.SocketDiagTCP(fam)
				if err != nil {
					return err
				}
				add("tcp", ss)
			}
			if udp {
				ss, err := h.SocketDiagUDP(fam)
				if err != nil {
					return err
				}
				add("udp", ss)
			}
		}
		return nil
	})
	return rows, err
}
