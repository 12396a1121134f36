package kubelet

import (
	"context"
	"errors"
)

// process is a container's process as the kubelet runs it: the pod's
// servers (*pod.Process) or another of the image's commands
// (commandProcess). Its
// methods are safe for concurrent use; Start once, then Stop and Kill.
type process interface {
	// Start starts it; an error is a process that could not start (exit
	// code 1). It may also end at once on its own (Done, Err).
	Start(ctx context.Context) error
	// Stop is SIGTERM, bounded by ctx (the time left before SIGKILL): it
	// returns once the process ended, with an error when it did not end
	// on its own within ctx (it was then stopped hard).
	Stop(ctx context.Context) error
	// Kill is SIGKILL: it returns once the process ended.
	Kill()
	// Done is closed once the process ended: stopped, killed, or on its
	// own.
	Done() <-chan struct{}
	// Err says why the process ended on its own, nil when it exited 0 or
	// was stopped; an *exitError carries an exit code other than 1.
	Err() error
}

// server is what a process that serves the pod's gRPC calls also does:
// the image's admin endpoint and Kubelet.Hang and SetHealthy act on it.
// *pod.Process is one; the load client is not.
type server interface {
	Hang(ctx context.Context, hang bool) error
	SetReady(ok bool)
	SetHealthy(ok bool)
}

// exitError is a process's end on its own with code.
type exitError struct {
	code int32
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCodeOf is the exit code of a process that ended on its own with
// err: an exitError's, else 1.
func exitCodeOf(err error) int32 {
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return 1
}
