package cli

import (
	"context"
	"fmt"
)

// await runs load, which reads and checks a command's input (named input
// in messages), and returns
// its result, or an interruption as soon as ctx ends (SIGINT, SIGTERM):
// parsing and checking a file of the largest size taken can use a few
// seconds of CPU, and Ctrl-C must not wait for it. load's goroutine then
// ends by itself: its reads end with ctx (scenario.ReadFile) and its work
// is bounded by the input limits (scenario.MaxFileSize and the like).
func await[T any](ctx context.Context, input string, load func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := load()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("interrupted while reading and checking %s: %w", input, ctx.Err())
	}
}
