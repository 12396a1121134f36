package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/clusterrun"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

func newCmdCluster(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run scenarios on the cluster your kubeconfig names",
	}
	groupCmd(cmd)
	cmd.AddCommand(NewCmdClusterRun(stdin, stdout, stderr, nil), NewCmdClusterClean(stdin, stdout, stderr))
	return cmd
}

// ClusterRunOptions are `pinlab cluster run`'s flags.
type ClusterRunOptions struct {
	File     string
	Image    string
	Output   string
	Variants []string
	Yes      bool
	Keep     bool
	Seed     uint64
	HTML     string
	Progress string
	LogLevel string
	Kube     *evidence.Kube

	In       io.Reader // the scenario for "-"
	Answer   io.Reader // the consent answer without --yes
	Out, Err io.Writer
}

// NewCmdClusterRun returns `pinlab cluster run`; runF replaces the
// behaviour in tests (nil means clusterRun).
func NewCmdClusterRun(stdin io.Reader, stdout, stderr io.Writer, runF func(context.Context, *ClusterRunOptions) error) *cobra.Command {
	o := &ClusterRunOptions{Kube: &evidence.Kube{}, In: stdin, Answer: stdin, Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "run SCENARIO --image REF [--yes]",
		Short: "Run a scenario on a real cluster, each variant in a namespace of its own",
		Long: `Run a scenario (a file, - for standard input, or a built-in by name) on the
cluster your kubeconfig names, as lab run runs it on the lab, and report it
the same way. Each variant runs in a new namespace (pinlab-RUN-N, labelled
pinlab.dev/run=RUN): the scenario's objects with the pinlab image (--image,
from pinlab image build --push) and its load clients as pods, one
StatefulSet per client group. The figures come from the clients' calls,
read through the API server's port-forward.

What a real cluster cannot reproduce (DNS settings, kube-proxy modes, the
lab's in-process L7 proxy, client-side DNS caches) is refused, naming the
field, before anything is created. cluster run checks your permissions
(deploy/rbac/cluster-run.yaml grants them), prints what it will create and
asks before the first write (--yes answers for you). It deletes its
namespaces when it ends, fails or is interrupted (--keep leaves them);
pinlab cluster clean removes what a killed run left, once the run's lease
on them has lapsed (within 30 s of its last renewal).

Exit codes: 0 done; 1 a failed expectation, step or variant, an error, or
a scenario field a cluster cannot reproduce; 2 bad flags, an unknown
variant or scenario, missing permissions, no consent; 3 some expectations
could not be judged (the clients fell behind); 130 interrupted.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return exit.UsageError(fmt.Errorf("cluster run takes one scenario, got %d", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.File = args[0]
			if err := o.check(cmd.Flags()); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return clusterRun(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Image, "image", "", "the pinlab image the pods run, best by digest (pinlab image build --push REF prints it); required")
	f.BoolVarP(&o.Yes, "yes", "y", false, "create what the run needs without asking")
	f.BoolVar(&o.Keep, "keep", false, "leave the namespaces when the run ends, for inspection (pinlab cluster clean removes them)")
	reportFlags(f, &o.Output, &o.HTML, &o.Progress, &o.Variants)
	f.Uint64Var(&o.Seed, "seed", 0, "seed for random picks (0: random, reported)")
	f.StringVar(&o.LogLevel, "log-level", "off", "what the run does on the cluster, on stderr: off, info or debug")
	kubeFlags(f, o.Kube)
	return cmd
}

// kubeFlags are kubectl's flags that pick the cluster.
func kubeFlags(f *pflag.FlagSet, k *evidence.Kube) {
	f.StringVar(&k.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	f.StringVar(&k.Context, "context", "", "the kubeconfig context to use (default: the current one)")
	f.StringVar(&k.As, "as", "", "the user to impersonate, as kubectl --as")
}

func (o *ClusterRunOptions) check(f *pflag.FlagSet) error {
	lo := LabRunOptions{Output: o.Output, Progress: o.Progress, LogLevel: o.LogLevel, HTML: o.HTML, Variants: o.Variants,
		ControlPlane: controlPlaneEmbedded, UIAddr: DefaultUIAddr, DiagnoseWindow: evidence.DefaultWindow}
	if err := lo.check(f); err != nil {
		return err
	}
	if o.Image == "" {
		return exit.UsageError(errors.New("--image: required: the pinlab image the pods run (pinlab image build --push REF prints it)"))
	}
	return nil
}

func clusterRun(ctx context.Context, o *ClusterRunOptions) error {
	lo := &LabRunOptions{Output: o.Output, Progress: o.Progress, HTML: o.HTML, Out: o.Out, Err: o.Err}
	var line *progressLine
	if show(lo) {
		line = &progressLine{w: o.Err, live: isTerminal(o.Err)}
		defer line.finish()
	}
	eo := clusterrun.Options{Scenario: o.File, In: o.In, Kube: o.Kube, Image: o.Image, Variants: o.Variants,
		Keep: o.Keep, Seed: o.Seed, Notes: o.Err, Confirm: consent(o.Yes, o.Answer, o.Err)}
	if lvl, ok := logLevels[o.LogLevel]; ok {
		eo.Logger = slog.New(slog.NewTextHandler(o.Err, &slog.HandlerOptions{Level: lvl}))
	}
	if line != nil {
		eo.Progress = line.update
	}
	html, err := createHTML(o.HTML)
	if err != nil {
		return err
	}
	res, err := clusterrun.Run(ctx, eo)
	return finishRun(lo, html, res, err)
}

// consent returns the engine's Confirm: yes answers at once; otherwise
// the summary is printed on w and a line read from answer, "y" or "yes"
// consenting. Without a terminal to ask on, --yes is needed. Ctrl-C while
// it asks ends the wait (the read goes on until the process exits: a
// terminal read cannot be cancelled).
func consent(yes bool, answer io.Reader, w io.Writer) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, summary string) (bool, error) {
		fmt.Fprintln(w, summary)
		if yes {
			return true, nil
		}
		if f, ok := answer.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
			return false, exit.UsageError(errors.New("not confirmed: standard input is not a terminal to ask on; give --yes"))
		}
		fmt.Fprint(w, "Go on? [y/N] ")
		type read struct {
			line string
			err  error
		}
		got := make(chan read, 1)
		go func() {
			line, err := bufio.NewReader(io.LimitReader(answer, 64)).ReadString('\n')
			got <- read{line, err}
		}()
		select {
		case <-ctx.Done():
			fmt.Fprintln(w)
			return false, ctx.Err()
		case r := <-got:
			if r.err != nil && !errors.Is(r.err, io.EOF) {
				return false, r.err
			}
			return slices.Contains([]string{"y", "yes"}, strings.ToLower(strings.TrimSpace(r.line))), nil
		}
	}
}

// ClusterCleanOptions are `pinlab cluster clean`'s flags.
type ClusterCleanOptions struct {
	Run  string
	Yes  bool
	Kube *evidence.Kube
}

// NewCmdClusterClean returns `pinlab cluster clean`.
func NewCmdClusterClean(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	o := &ClusterCleanOptions{Kube: &evidence.Kube{}}
	cmd := &cobra.Command{
		Use:   "clean [--run RUN] [--yes]",
		Short: "Delete the namespaces that cluster runs left (killed, or --keep)",
		Long: `Delete the namespaces that pinlab cluster run created and did not delete (the
run was killed, or given --keep), found by their label pinlab.dev/run, and
wait until they are gone.

A run in progress renews a lease in each of its namespaces every 10 s;
clean leaves those namespaces and names them. A killed run's lease lapses
within 30 s of its last renewal. A lease that looks lapsed is watched for
up to 15 s for a renewal first, in case this machine's clock is ahead of
the runner's. --run RUN takes only that run's namespaces, even while it
is in progress.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return clusterrun.Clean(cmd.Context(), clusterrun.CleanOptions{Kube: o.Kube, Run: o.Run, Out: stdout, Confirm: consent(o.Yes, stdin, stderr)})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Run, "run", "", "only this run's namespaces (its ID, as cluster run printed it), even while it is in progress")
	f.BoolVarP(&o.Yes, "yes", "y", false, "delete without asking")
	kubeFlags(f, o.Kube)
	return cmd
}
