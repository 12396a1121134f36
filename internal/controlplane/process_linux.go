package controlplane

import "syscall"

// sysProcAttr puts a component in its own process group and kills it if
// pinlab dies first (PR_SET_PDEATHSIG: bound to the forking thread, which
// the Go runtime keeps while the process runs unless a goroutine that
// locked it exits).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
