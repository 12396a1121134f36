//go:build linux

package clusterdns

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// pending reports whether bytes wait in c's receive buffer, unread
// (ioctl TIOCINQ, alias FIONREAD and, on sockets, SIOCINQ); false when
// it cannot tell.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }) != nil {
		return false
	}
	return n > 0
}
