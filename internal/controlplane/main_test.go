package controlplane

import (
	"testing"

	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
)

// TestMain runs the tests in a private network namespace whose pod and
// Service ranges are local (pods get 10.244.0.x, which the API server
// requires: it refuses loopback endpoint addresses), and checks that no
// goroutine outlives them.
func TestMain(m *testing.M) {
	netnstest.Main(netnstest.LeakChecked(m), netns.PodPrefix, netns.ServicePrefix)
}
