package remote

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the package starts (informers, port-forwards, relays)
// has ended when its tests return.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
