//go:build !linux

package agent

import "errors"

// readSockDiag fails: sock_diag is Linux's.
func readSockDiag() ([]socket, error) {
	return nil, errors.New("agent: sock_diag needs Linux")
}
