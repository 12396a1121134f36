// Package labtest helps tests of the lab's components: a fake API server
// with a shared informer factory over it (API), the Services and
// EndpointSlices the EndpointSlice controller would write, a logger into
// the test's log, a context tied to the test, waiting on a condition with a
// deadline, and running a component's Run for a while or until the test
// ends.
//
// The tests of kube-proxy's emulation (internal/proxy), the L7 proxy
// (internal/l7proxy), the cluster DNS (internal/clusterdns), the kubelet,
// the pods, the load clients, the lab and the CLI share it. It imports
// none of the lab's packages, so their internal tests can use it.
package labtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Logger returns a logger that writes text lines at debug level to t.Log,
// which shows them only for failed tests or with -v.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logWriter sends each line written to t.Log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// Context returns a context that ends after timeout or when the test ends,
// whichever comes first.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// Poll calls cond every interval until it holds and returns nil, or
// returns ctx's error once ctx ends first. It calls cond at once, and from
// this goroutine only.
func Poll(ctx context.Context, interval time.Duration, cond func() bool) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// WaitFor polls cond every 5 ms until it holds, and fails t naming what it
// waited for if timeout passes first.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if Poll(ctx, 5*time.Millisecond, cond) != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// RunFor calls run with a context that ends after d and returns its error.
func RunFor(run func(context.Context) error, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return run(ctx)
}

// Run calls run in a goroutine with a context that stop cancels; stop then
// waits for run to return and returns its error. stop may be called more
// than once (each call returns the same error); the test's cleanup calls
// it too.
func Run(t testing.TB, run func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return stop
}
