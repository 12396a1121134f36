package kubeproxy

import (
	"testing"

	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
)

// TestMain runs the tests in a private network namespace whose pod and
// Service ranges are local, and checks that no goroutine outlives them.
func TestMain(m *testing.M) {
	netnstest.Main(netnstest.LeakChecked(m), netns.PodPrefix, netns.ServicePrefix)
}
