//go:build !linux

package podshell

import "errors"

// sockets needs Linux's sock_diag.
func (sh *shell) sockets(tcp, udp bool) ([]row, error) {
	return nil, errors.New("listing sockets needs Linux")
}
