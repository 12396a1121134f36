//go:build !linux

package controlplane

import "syscall"

// sysProcAttr puts a component in its own process group.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
