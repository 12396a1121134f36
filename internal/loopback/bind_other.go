//go:build !linux

package loopback

import "syscall"

// bindNoPort does nothing outside Linux: binding the source IP reserves a
// port there, which limits one source IP to the ephemeral port range.
func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
