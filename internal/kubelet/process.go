package kubelet

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podlog"
	"github.com/pinlab/pinlab/internal/workload"
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

// commandProcess is a container of another of the pinlab image's
// commands (its load client, Config.LoadClient; its xDS control plane,
// Config.XDSServer) run in-process: run is the command, as the image's
// process runs it, until its context ends. SIGTERM (Stop) and SIGKILL
// (Kill) end that context; it then stops and exits (0, or 137 as the
// kubelet counts a kill).
type commandProcess struct {
	run  func(ctx context.Context) int
	errs *tailWriter // the container's stderr

	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error // why it ended on its own; written before done closes
}

// Causes of a command process's end, as its log names them.
var (
	errSIGTERM = errors.New("terminated")
	errSIGKILL = errors.New("killed")
)

func (l *commandProcess) Start(context.Context) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		if code := l.run(ctx); code != 0 {
			l.err = &exitError{int32(code), errors.New(cmp.Or(l.errs.last(), fmt.Sprintf("exit %d", code)))}
		}
	}()
	return nil
}

func (l *commandProcess) Stop(ctx context.Context) error {
	l.cancel(errSIGTERM)
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		<-l.done // the command ends promptly once its context has
		return pod.ErrHardStop
	}
}

func (l *commandProcess) Kill() {
	l.cancel(errSIGKILL)
	<-l.done
}

func (l *commandProcess) Done() <-chan struct{} { return l.done }

func (l *commandProcess) Err() error {
	select {
	case <-l.done:
		return l.err
	default:
		return nil
	}
}

// commandArgs is what every container of the image's other commands
// starts from: its pinlab args (workload.ContainerArgs of the spec as the
// node runs it: image pinlab, or pinned by a digest the node holds) and
// its stdout and stderr, line by line into out.
func (w *podWorker) commandArgs(p *corev1.Pod, out *podlog.Log) (args []string, stdout, stderr *tailWriter, err error) {
	spec, _ := w.k.pinlabSpec(&p.Spec)
	args, err = workload.ContainerArgs(&spec.Containers[0])
	if err != nil {
		return nil, nil, nil, err
	}
	return args, &tailWriter{out: out}, &tailWriter{out: out}, nil
}
