//go:build !linux

package load

import "time"

// nanosleep sleeps for d (runtime timers: see sleep_linux.go).
func nanosleep(d time.Duration) { time.Sleep(d) }

// preciseThread does nothing here.
func preciseThread() (restore func()) { return func() {} }
