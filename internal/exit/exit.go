// Package exit holds the exit codes pinlab's commands end with, and the
// errors that carry them: an engine (package labrun, labup) returns
// UsageError(err) for a mistake in how the command was called, or a Code
// for an outcome a script branches on, and the CLI, which alone ends the
// process, maps them with Of. `pinlab --help` lists the codes.
package exit

import (
	"context"
	"errors"
	"fmt"
)

// Code is a process exit code. As an error it ends a command with that
// code and no message of its own (what to say was said already).
type Code int

// The exit codes.
const (
	OK     Code = 0
	Failed Code = 1 // the command failed: bad input, a failed run, an error
	Usage  Code = 2 // bad flags or arguments
	// Overloaded: lab run finished and no expectation failed, but some
	// could not be judged: the machine was overloaded where they were
	// measured (the load generator fell behind its schedule).
	Overloaded Code = 3
	Pinned     Code = 4 // diagnose: the calls are pinned to a few pods
	Unknown    Code = 5 // diagnose: the evidence could not tell
	// Differ: lab run --compare-dataplanes finished and some figure
	// differs between the dataplanes beyond its tolerance.
	Differ Code = 6
	// Interrupted: SIGINT or SIGTERM stopped a command before it was done
	// (128 + SIGINT, as shells report a process killed by Ctrl-C).
	Interrupted Code = 130
)

// Codes lists every exit code, in order (for the help that names them).
var Codes = []Code{OK, Failed, Usage, Overloaded, Pinned, Unknown, Differ, Interrupted}

func (c Code) Error() string { return fmt.Sprintf("exit %d", int(c)) }

// UsageError marks err as a mistake in how the command was called: Of
// gives Usage.
func UsageError(err error) error { return usageError{err} }

// OverloadedError marks err as a run an overloaded machine invalidated in
// part: Of gives Overloaded.
func OverloadedError(err error) error { return overloadedError{err} }

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

type overloadedError struct{ error }

func (e overloadedError) Unwrap() error { return e.error }

// IsUsage reports whether err is marked as a usage mistake.
func IsUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}

// Of returns the exit code for err, what a command run with ctx returned,
// and whether err's message is still to be said: a Code was said already;
// a usage mistake gives Usage, an overloaded run Overloaded, any other
// error Interrupted once ctx has ended and Failed before.
func Of(ctx context.Context, err error) (code Code, say bool) {
	if err == nil {
		return OK, false
	}
	var c Code
	if errors.As(err, &c) {
		return c, false
	}
	var oe overloadedError
	switch {
	case IsUsage(err):
		return Usage, true
	case errors.As(err, &oe):
		return Overloaded, true
	case ctx.Err() != nil:
		return Interrupted, true
	}
	return Failed, true
}
