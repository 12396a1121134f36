package runner_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Runs start mini-clusters, clients and servers; all of them must be gone
// when a run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
