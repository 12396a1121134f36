package l7proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test or benchmark leaves a goroutine
// behind: Close must end the server, every handler and every upstream
// connection.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
