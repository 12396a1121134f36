package coredns

import "syscall"

// sysProcAttr puts CoreDNS in its own process group (a Ctrl-C reaches
// pinlab, which stops it) and kills it if pinlab dies first
// (PR_SET_PDEATHSIG, as internal/controlplane does for its components).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
