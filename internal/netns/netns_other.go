//go:build !linux

package netns

import (
	"context"
	"net/netip"
	"os/exec"
)

// Run returns ErrUnsupported: private network namespaces need Linux.
func Run(context.Context, Config) (int, error) { return 0, ErrUnsupported }

// Inside is false outside Linux.
func Inside() bool { return false }

// Setup returns ErrUnsupported.
func Setup(...netip.Prefix) error { return ErrUnsupported }

// Command returns a command whose Run fails with ErrUnsupported.
func Command(pid int, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Err = ErrUnsupported
	return c
}
