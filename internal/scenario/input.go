package scenario

import (
	"context"
	"fmt"
	"io"

	"github.com/pinlab/pinlab/internal/plan"
)

// StdinName is how a scenario or manifests read from standard input are
// named in messages.
const StdinName = "<stdin>"

// OpenInput reads and checks the scenario name names, a file path, a
// built-in's name, or "-" for in (standard input), and returns its plan.
// An unknown file or built-in gives an error wrapping ErrNotFound.
//
// It returns as soon as ctx ends (SIGINT, SIGTERM), with an error saying
// so: parsing and checking a file of the largest size taken can use a few
// seconds of CPU, and Ctrl-C must not wait for it. The reading goroutine
// then ends by itself: its reads end with ctx and its work is bounded by
// the input limits (MaxFileSize and the like).
func OpenInput(ctx context.Context, name string, in io.Reader) (*plan.Plan, error) {
	return await(ctx, name, func() (*plan.Plan, error) {
		if name != "-" {
			return Open(ctx, name)
		}
		data, err := ReadAll(ctx, InputName(name), in)
		if err != nil {
			return nil, err
		}
		return Load(StdinName, data)
	})
}

// OpenObjectsInput is OpenInput for manifests (OpenObjects, LoadObjects),
// as `lab up` reads them.
func OpenObjectsInput(ctx context.Context, name string, in io.Reader) (*File, error) {
	return await(ctx, name, func() (*File, error) {
		if name != "-" {
			return OpenObjects(ctx, name)
		}
		data, err := ReadAll(ctx, InputName(name), in)
		if err != nil {
			return nil, err
		}
		return LoadObjects(StdinName, data)
	})
}

// InputName names an input argument in messages: "standard input" for
// "-", else the argument.
func InputName(name string) string {
	if name == "-" {
		return "standard input"
	}
	return name
}

// await runs load and returns its result, or an interruption as soon as
// ctx ends.
func await[T any](ctx context.Context, name string, load func() (T, error)) (T, error) {
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
		return zero, fmt.Errorf("interrupted while reading and checking %s: %w", InputName(name), ctx.Err())
	}
}
