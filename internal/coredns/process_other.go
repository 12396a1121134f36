//go:build !linux

package coredns

import "syscall"

// sysProcAttr puts CoreDNS in its own process group.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
