// Package cli is pinlab's command line: a cobra root command and one
// constructor per verb, each with an options struct and a run function so
// flags and behaviour can be tested apart.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/spf13/cobra"
)

// Exit codes (package exit says what each means).
const (
	ExitOK          = int(exit.OK)
	ExitError       = int(exit.Failed)
	ExitUsage       = int(exit.Usage)
	ExitOverloaded  = int(exit.Overloaded)
	ExitInterrupted = int(exit.Interrupted)
)

// Main runs pinlab with args and returns the process exit code. It cancels
// the run on SIGINT, SIGTERM or SIGHUP (the terminal closed): each ends it
// as Ctrl-C does, report written and token file removed.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return run(ctx, args, stdout, stderr)
}

// run is Main with the context that signals cancel.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := NewRootCmd(stdout, stderr)
	root.SetArgs(args)
	return codeOf(ctx, root.ExecuteContext(ctx), stderr)
}

// codeOf reports err, what a command run with ctx returned, on stderr
// (unless it was said already) and returns the process exit code for it.
func codeOf(ctx context.Context, err error, stderr io.Writer) int {
	code, say := exit.Of(ctx, err)
	if say {
		fmt.Fprintf(stderr, "pinlab: %v\n", err)
	}
	return int(code)
}

// DisplayName is the program's name in help and usage: "pinlab", or
// "kubectl pinlab" when the binary runs as the kubectl plugin
// kubectl-pinlab (set by main before anything runs).
var DisplayName = "pinlab"

// NewRootCmd returns the pinlab command tree.
func NewRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:         "pinlab",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: DisplayName},
		Short:       "See gRPC connection pinning on Kubernetes, measured, and what each fix does",
		Long: `pinlab runs an embedded mini Kubernetes cluster on loopback: pods are real
grpc-go servers, ClusterIP Services are served by a kube-proxy-like L4 proxy,
a real DNS server answers cluster DNS, and real gRPC clients drive load. It
reports per-pod request rates so connection pinning and its fixes show up as
numbers.

Exit codes:
  0    done (lab up: stopped by Ctrl-C once up; diagnose: balanced)
  1    failed: bad input, a failed run, a failed expectation or timeline step,
       a lab that refused or stopped answering, lab load with failed calls
  2    bad flags or arguments (an unknown scenario or variant too)
  3    lab run: no expectation failed, but some could not be judged on an
       overloaded machine (-o json has "overloaded": true whenever the load
       generator fell behind for the machine's reasons, even when no
       expectation was affected; not for the lab's own bursts)
  4    diagnose: pinned
  5    diagnose: could not tell
  6    lab run --compare-dataplanes: a figure differs beyond its tolerance
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP) before the command was done`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Inside a lab's private network namespace (lab up --control-plane
		// kubernetes, or a pinlab that lab exec runs there) the lab's pod
		// and Service ranges are local: let the commands reach them.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if netns.Inside() {
				return netns.Setup(netns.PodPrefix, netns.ServicePrefix)
			}
			return nil
		},
	}
	groupCmd(root)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exit.UsageError(err) })
	root.AddCommand(newCmdLab(stdout, stderr), NewCmdReport(stdout, stderr, nil), NewCmdDiagnose(stdout, stderr, nil), newCmdImage(stdout, stderr), newCmdCluster(os.Stdin, stdout, stderr), newCmdXDS(stdout, stderr))
	return root
}

func newCmdLab(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run scenarios in the embedded mini-cluster",
	}
	groupCmd(cmd)
	cmd.AddCommand(NewCmdLabRun(stdout, stderr, nil), NewCmdLabUp(stdout, stderr, nil), NewCmdLabGet(stdout, stderr),
		NewCmdLabScale(stdout), NewCmdLabDelete(stdout), NewCmdLabReady(stdout, false), NewCmdLabReady(stdout, true), NewCmdLabTargets(stdout, stderr), NewCmdLabLoad(stdout, stderr),
		NewCmdLabExec(os.Stdin, stdout, stderr))
	return cmd
}

// groupCmd makes cmd, a command that only groups subcommands, print its
// help when called alone and reject an unknown subcommand as a usage error
// (cobra would print the help and exit 0).
func groupCmd(cmd *cobra.Command) {
	cmd.SuggestionsMinimumDistance = 2
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		}
		return exit.UsageError(fmt.Errorf("%s (see %s --help)", msg, c.CommandPath()))
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
}
