package kubeapitest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that nothing is left running: the servers, both
// resolvers and client-go's clients stop with their tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
