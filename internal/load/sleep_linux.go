//go:build linux

package load

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// waiter waits for short, precise times without holding a P: a timerfd
// (the kernel's high-resolution timers, no timer slack) read through the
// runtime's netpoller, which parks the waiting goroutine and wakes it as
// soon as the timer expires and a P is free. A runtime timer wakes up to
// about 1 ms late (golang/go#44343); nanosleep(2), what the Scheduler
// used before, is precise but blocks its thread in a system call holding
// its P, and a Scheduler locked to its thread had to get a P back by a
// thread switch for every call: five variants side by side made schedule
// lags of 12-21 ms (p99) on a 2-core machine.
type waiter struct {
	fd int
	f  *os.File
}

// newWaiter returns a waiter, or nil when the kernel gives no timerfd
// (the caller then waits with a runtime timer).
func newWaiter() *waiter {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	// A non-blocking descriptor makes a pollable File: its Read parks the
	// goroutine in the netpoller. (Its Fd method would make it blocking:
	// the descriptor is kept aside instead.)
	return &waiter{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

// wait returns after d (at once for d <= 0).
func (w *waiter) wait(d time.Duration) {
	if d <= 0 {
		return
	}
	if w == nil {
		time.Sleep(d)
		return
	}
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(w.fd, 0, &its, nil); err != nil {
		time.Sleep(d)
		return
	}
	var expirations [8]byte
	if _, err := w.f.Read(expirations[:]); err != nil {
		time.Sleep(time.Until(time.Now().Add(d))) // closed: wait out d anyway
	}
}

// close releases the timerfd.
func (w *waiter) close() {
	if w != nil {
		w.f.Close()
	}
}
