//go:build !linux

package proxy

import "net"

// hungUp reports false outside Linux, which has no POLLRDHUP: a dial
// there ends only by itself or Config.DialTimeout.
func hungUp(*net.TCPConn) bool { return false }
