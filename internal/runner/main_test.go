package runner_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/pinlab/pinlab/internal/machinetest"
)

// Runs start mini-clusters, clients and servers; all of them must be gone
// when a run returns. The scenario tests judge timing, so they hold the
// machine against the other lab-heavy test binaries (machinetest).
func TestMain(m *testing.M) {
	release := machinetest.Hold()
	code := m.Run()
	release()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// attempts is how many times a scenario test runs a scenario the machine
// overloaded before it skips: this VM's steal time (5-17% most seconds,
// about a third at times) overloaded 2 to 6 of 15 scenario tests in a
// CI run with two.
const attempts = 3

// tally records, when PINLAB_RUNS_LOG names a file, that a scenario test
// ran ("ran NAME") or was skipped because the machine was overloaded: by
// the hypervisor's steal in every attempt ("stolen NAME: why") or not
// ("overloaded NAME: why"), a line each. .ci/run counts them and fails
// when too many were skipped for reasons other than the hypervisor's.
func tally(t *testing.T, what, why string) {
	path := os.Getenv("PINLAB_RUNS_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("PINLAB_RUNS_LOG: %v", err)
		return
	}
	defer f.Close()
	line := what + " " + t.Name()
	if why != "" {
		line += ": " + strings.Join(strings.Fields(why), " ")
	}
	fmt.Fprintln(f, line)
}
