package runner_test

import (
	"context"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/scenariotest"
)

// TestOverloadIsInvalid: with CPU hogs beside the run (twice as many busy
// processes as CPUs, stopped with the test), timing checks that the
// starved machine breaks come out INVALID, not FAIL, and the report says
// where the generator fell behind. On a machine the hogs do not starve the
// checks pass, which is fine too: no check may FAIL.
func TestOverloadIsInvalid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range 2 * runtime.NumCPU() {
		hog := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	p := scenariotest.Load(t, objects(2)+`---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: hogged}
spec:
  duration: 6s
  clients:
  - {name: order, namespace: shop, count: 20, target: "`+headless+`", policy: round_robin, rate: 50}
  windows: [{name: run, from: 1s, to: 6s}]
  expect:
  - {name: fast, window: run, metric: latencyP99Ms, atMost: 2}
  - {name: nothing fails, metric: failedShare, atMost: 0}
  - {name: spread, window: run, metric: jain, atLeast: 0.5}
`)
	res := pipeline(t, p, 2*time.Minute, runner.Options{})
	v := res.Variants[0]
	for _, c := range v.Checks {
		if !c.Pass && !c.Invalid {
			t.Errorf("check %q: %s = %s FAILED (note %q); an overloaded machine must make timing checks INVALID", c.Name, c.Metric, c.Shown, c.Note)
		}
	}
	t.Logf("overloaded: %+v; invalid checks: %d", v.Overloaded, v.Invalid())
}
