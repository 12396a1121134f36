package kubeproxy

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
)

// TestMain runs the tests in a private network namespace whose pod and
// Service ranges are local, and checks that no goroutine outlives them.
func TestMain(m *testing.M) {
	netnstest.Main(leakChecked{m}, netns.PodPrefix, netns.ServicePrefix)
}

type leakChecked struct{ m *testing.M }

func (l leakChecked) Run() int {
	code := l.m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}
