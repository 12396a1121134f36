// Package cli is pinlab's command line: a cobra root command and one
// constructor per verb, each with an options struct and a run function so
// flags and behaviour can be tested apart.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the command failed (bad input, a failed run)
	ExitUsage = 2 // bad flags or arguments
)

// usageError marks errors in how the command was called.
type usageError struct{ error }

// Main runs pinlab with args and returns the process exit code. It cancels
// the run on SIGINT or SIGTERM.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "pinlab: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitError
}

// NewRootCmd returns the pinlab command tree.
func NewRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "pinlab",
		Short: "See gRPC connection pinning on Kubernetes, measured, and what each fix does",
		Long: `pinlab runs an embedded mini Kubernetes cluster on loopback: pods are real
grpc-go servers, ClusterIP Services are served by a kube-proxy-like L4 proxy,
a real DNS server answers cluster DNS, and real gRPC clients drive load. It
reports per-pod request rates so connection pinning and its fixes show up as
numbers.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newCmdLab(stdout, stderr))
	return root
}

func newCmdLab(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run scenarios in the embedded mini-cluster",
	}
	cmd.AddCommand(NewCmdLabRun(stdout, stderr, nil), NewCmdLabUp(stdout, stderr, nil), NewCmdLabGet(stdout),
		NewCmdLabScale(stdout), NewCmdLabDelete(stdout), NewCmdLabReady(stdout, false), NewCmdLabReady(stdout, true))
	return cmd
}
