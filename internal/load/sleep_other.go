//go:build !linux

package load

import "time"

// waiter waits with a runtime timer elsewhere than Linux (see
// sleep_linux.go).
type waiter struct{}

func newWaiter() *waiter { return nil }

func (*waiter) wait(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

func (*waiter) close() {}
