//go:build linux

package load

import (
	"time"

	"golang.org/x/sys/unix"
)

// nanosleep blocks the calling thread for d with nanosleep(2): the kernel's
// high-resolution timers wake it within the thread's timer slack (50 us
// by default), where the Go runtime's timers round up to about 1 ms.
func nanosleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// timerSlack is the calling thread's timer slack while the Scheduler runs:
// how late the kernel may wake a nanosleep to batch wake-ups (50 us by
// default, prctl(2) PR_SET_TIMERSLACK).
const timerSlack = 1000 // ns

// preciseThread lowers the calling (locked) thread's timer slack and
// returns a function that restores it.
func preciseThread() (restore func()) {
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || unix.Prctl(unix.PR_SET_TIMERSLACK, timerSlack, 0, 0, 0) != nil {
		return func() {}
	}
	return func() { unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0) }
}
