package kubernetes

import (
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/watch"
)

func TestMain(m *testing.M) {
	// The fake clientset panics when a watcher's buffer (100 events) is
	// full; the benchmarks update slices faster than that in bursts.
	watch.DefaultChanSize = 10000
	goleak.VerifyTestMain(m)
}
