package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test or benchmark leaves a goroutine
// behind: Run must close every listener and relay and wait for them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
