package netnstest_test

import (
	"context"
	"testing"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
)

func TestMain(m *testing.M) { netnstest.Main(m, netns.PodPrefix) }

// TestRunsInsideNamespace fails unless Main ran the tests in a private
// namespace with the pod range set up (or skipped them all).
func TestRunsInsideNamespace(t *testing.T) {
	if !netns.Inside() {
		t.Fatal("tests run outside a private namespace")
	}
	ln, err := loopback.Listen(context.Background(), "10.244.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := loopback.Listen(context.Background(), "10.96.0.1:0"); err == nil {
		t.Fatal("listened on 10.96.0.1, which Main was not asked to set up")
	}
}
