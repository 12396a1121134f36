package loopback

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// bindNoPort sets IP_BIND_ADDRESS_NO_PORT so binding the source IP does not
// reserve a port: the kernel picks it at connect time per destination, so
// one source IP can hold far more than 28k connections (the ephemeral
// range) across destinations, as a pod's IP can.
func bindNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
