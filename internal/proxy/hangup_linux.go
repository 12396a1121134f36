package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// hungUp reports whether c's peer has closed or reset its end (poll(2)
// POLLRDHUP, POLLHUP or POLLERR), without reading or waiting.
func hungUp(c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true
	}
	var up bool
	if err := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, perr := unix.Poll(fds, 0)
		up = perr == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	}); err != nil {
		return true // closed here
	}
	return up
}
