// Package machinetest lets the lab-heavy test binaries take the machine in
// turn. `go test ./...` runs up to GOMAXPROCS test binaries at once; on 2
// cores a second binary starting labs, control planes or kube-proxies
// beside the scenario tests (internal/runner) overloads them, and an
// overloaded scenario judges nothing (its timing is the machine's). Each
// such package holds the machine for its whole run:
//
//	func TestMain(m *testing.M) {
//		release := machinetest.Hold()
//		code := m.Run()
//		release()
//		os.Exit(code)
//	}
//
// The holders are the scenario tests (internal/runner), the CLI's
// (internal/cli), the image build's (internal/imagebuild, which compiles
// for two platforms) and those of the real control plane tier (every
// package that uses netnstest.Main). The lighter packages run beside a holder
// unless a waiting binary takes go test's other slot (internal/controlplane
// waited 5.5 min behind internal/cli in one run). go test's kill timer
// (-timeout plus a minute, from the binary's start) counts the wait: the
// README's command gives 45 minutes.
package machinetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockName is the lock's file in os.TempDir(): an flock(2) lock, so it is
// released when the holder exits, however it exits (kill -9 included).
const LockName = "pinlab-lab-tests.lock"

// HeldEnv is set, to the holder's pid, while a process holds the lock; its
// children inherit it, and Hold in a descendant of that live process
// returns at once (a test binary re-executed by one that holds the lock
// must not wait for it). A stale or stray value is ignored.
const HeldEnv = "PINLAB_MACHINE_HELD"

// Hold blocks until this process holds the machine lock, and returns the
// function that releases it. While it waits it says so on stderr, once,
// after a second. Where the lock cannot be taken (the file cannot be
// opened, or flock fails) it says why on stderr and returns at once with
// a release that does nothing: tests then run side by side as before, and
// the scenario tests skip what the machine overloads. Not for concurrent
// use within one process.
func Hold() (release func()) {
	if pid, err := strconv.Atoi(os.Getenv(HeldEnv)); err == nil && ancestor(pid) {
		return func() {} // an ancestor holds it: waiting would deadlock
	}
	path := filepath.Join(os.TempDir(), LockName)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "machinetest: running without the machine lock: %v\n", err)
		return func() {}
	}
	start := time.Now()
	said := false
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			break
		}
		if !said && time.Since(start) > time.Second {
			fmt.Fprintf(os.Stderr, "machinetest: waiting for another lab-heavy test binary to finish (lock %s)\n", path)
			said = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		f.Close()
		fmt.Fprintf(os.Stderr, "machinetest: running without the machine lock: flock %s: %v\n", path, err)
		return func() {}
	}
	if said {
		fmt.Fprintf(os.Stderr, "machinetest: took the machine after %.0f s\n", time.Since(start).Seconds())
	}
	os.Setenv(HeldEnv, strconv.Itoa(os.Getpid()))
	return func() {
		os.Unsetenv(HeldEnv)
		f.Close() // closing the only descriptor releases the lock
	}
}

// ancestor reports whether pid is a parent, grandparent or further
// ancestor of this process (from the ppid fields of /proc/PID/stat).
func ancestor(pid int) bool {
	for p, n := os.Getppid(), 0; p > 1 && n < 64; n++ {
		if p == pid {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 2 {
			return false
		}
		if p, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return false
}
