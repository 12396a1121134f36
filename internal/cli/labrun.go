package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/verdict"
	"github.com/pinlab/pinlab/scenarios"
	"github.com/spf13/cobra"
)

// LabRunOptions are the inputs of `pinlab lab run`.
type LabRunOptions struct {
	// File is a scenario file path, a built-in scenario name, or "-" for
	// standard input (In).
	File       string
	Output     string // "table" or "json"
	Variants   []string
	Sequential bool
	Seed       uint64
	// Progress: "auto" (a live line when stderr is a terminal), "on", "off".
	Progress string
	// LogLevel of component logs on stderr: "off", "info" or "debug".
	LogLevel string
	// HTML, if not empty, is a file to write the HTML report to, besides
	// the report on Out.
	HTML string
	// UI serves a live dashboard on UIAddr while the run goes.
	UI     bool
	UIAddr string
	// ControlPlane is "embedded" or "kubernetes": each variant's lab on
	// its own real control plane, in a private network namespace (see
	// labup_kubernetes.go).
	ControlPlane string
	// Dataplane is what serves each variant's ClusterIPs and cluster DNS
	// on a real control plane: pinlab (its kube-proxy emulation and DNS),
	// kube-proxy-nftables or kube-proxy-iptables (the real kube-proxy and
	// the real CoreDNS; see lab.API.Dataplane).
	// Only with ControlPlane kubernetes.
	Dataplane string
	// CompareDataplanes runs the scenario twice on real control planes,
	// on pinlab's dataplane and then on the real one (Dataplane, default
	// kube-proxy-nftables), variants one after another in both, and
	// prints the figures side by side (report.CompareDataplanes).
	CompareDataplanes bool
	// Diagnose runs pinlab diagnose in each variant's lab while its load
	// runs, on every Service its clients target: the first channelz
	// reading at DiagnoseAt of load (0: DiagnoseWindow plus 2s before the
	// end), the second DiagnoseWindow later (0: 5s). Setting either
	// implies Diagnose.
	Diagnose       bool
	DiagnoseAt     time.Duration
	DiagnoseWindow time.Duration

	In       io.Reader
	Out, Err io.Writer
}

// NewCmdLabRun returns `pinlab lab run`; runF replaces the behaviour in
// tests (nil means labRun).
func NewCmdLabRun(stdout, stderr io.Writer, runF func(context.Context, *LabRunOptions) error) *cobra.Command {
	opts := &LabRunOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "run [FILE|NAME|-]",
		Short: "Run a scenario and report per-pod request rates for each variant",
		Long: fmt.Sprintf(`Run a scenario: Kubernetes YAML (Namespace, Deployment, Service) plus one
kind: Scenario document, from a file, standard input (-) or a built-in by
name. Without an argument runs the built-in %q scenario.
Built-in scenarios: %s.`, scenarios.Default, strings.Join(scenarios.Names(), ", ")),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("lab run takes at most one scenario, got %d", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("variant") && (len(opts.Variants) == 0 || slices.Contains(opts.Variants, "")) {
				return usageError{errors.New("--variant: an empty variant name; name one or more variants")}
			}
			opts.File = scenarios.Default
			opts.In = cmd.InOrStdin()
			if len(args) == 1 {
				opts.File = args[0]
			}
			if opts.Output != "table" && opts.Output != "json" {
				return usageError{fmt.Errorf("-o %q: expected table or json", opts.Output)}
			}
			if opts.Progress != "auto" && opts.Progress != "on" && opts.Progress != "off" {
				return usageError{fmt.Errorf("--progress %q: expected auto, on or off", opts.Progress)}
			}
			if _, ok := logLevels[opts.LogLevel]; !ok && opts.LogLevel != "off" {
				return usageError{fmt.Errorf("--log-level %q: expected off, info or debug", opts.LogLevel)}
			}
			switch opts.ControlPlane {
			case controlPlaneEmbedded:
			case controlPlaneKubernetes:
			default:
				return usageError{fmt.Errorf("--control-plane %q: expected %s or %s", opts.ControlPlane, controlPlaneEmbedded, controlPlaneKubernetes)}
			}
			if opts.CompareDataplanes {
				if err := opts.checkCompare(cmd.Flags().Changed("control-plane"), cmd.Flags().Changed("dataplane")); err != nil {
					return err
				}
			}
			if err := checkDataplane(opts.Dataplane, cmd.Flags().Changed("dataplane") || opts.CompareDataplanes, opts.ControlPlane); err != nil {
				return err
			}
			if err := loopback.CheckAddr(opts.UIAddr); err != nil {
				return usageError{fmt.Errorf("--ui-addr %q: expected IP:port inside 127.0.0.0/8 (%v)", opts.UIAddr, err)}
			}
			if err := opts.checkDiagnose(cmd.Flags().Changed("diagnose-at") || cmd.Flags().Changed("diagnose-window")); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return labRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.Output, "output", "o", "table", "output format: table or json (the full result)")
	f.StringSliceVar(&opts.Variants, "variant", nil, "run only these variants (repeat or comma-separate)")
	f.BoolVar(&opts.Sequential, "sequential", false, "run variants one after another instead of side by side")
	f.Uint64Var(&opts.Seed, "seed", 0, "seed for pod names, ClusterIPs and random picks (0: random, reported)")
	f.StringVar(&opts.Progress, "progress", "auto", "progress line on stderr: auto, on or off")
	f.StringVar(&opts.LogLevel, "log-level", "off", "component logs on stderr: off, info or debug")
	f.StringVar(&opts.HTML, "html", "", "also write the report as one self-contained HTML page to this file")
	f.BoolVar(&opts.UI, "ui", false, "serve a live dashboard on loopback while the run goes; its address, with a new token, is printed on stderr")
	f.StringVar(&opts.ControlPlane, "control-plane", controlPlaneEmbedded, "embedded (in-process API and controllers) or kubernetes (each variant on its own real etcd, kube-apiserver, kube-controller-manager and kube-scheduler, in a private network namespace; build them first with build/controlplane/build.sh)")
	f.StringVar(&opts.Dataplane, "dataplane", string(lab.DataplanePinlab), dataplaneUsage)
	f.BoolVar(&opts.CompareDataplanes, "compare-dataplanes", false, "run the scenario on real control planes twice, on pinlab's dataplane and on the real one (--dataplane, default kube-proxy-nftables), variants one after another, and print the figures side by side with the differences beyond tolerance marked (implies --control-plane kubernetes; exit 6 when they differ)")
	f.StringVar(&opts.UIAddr, "ui-addr", DefaultUIAddr, "address of the --ui dashboard (loopback; port 0 picks a free one)")
	f.BoolVar(&opts.Diagnose, "diagnose", false, "run pinlab diagnose in each variant's lab while its load runs, on every Service its clients target, and report its verdict")
	f.DurationVar(&opts.DiagnoseAt, "diagnose-at", 0, "time of load at which --diagnose takes its first reading (default: --diagnose-window plus 2s before the end); implies --diagnose")
	f.DurationVar(&opts.DiagnoseWindow, "diagnose-window", evidence.DefaultWindow, "time between --diagnose's two channelz readings of each pod; implies --diagnose")
	return cmd
}

func labRun(ctx context.Context, opts *LabRunOptions) error {
	onKube := opts.ControlPlane == controlPlaneKubernetes
	if onKube && !netns.Inside() {
		if _, err := controlplane.BinDir(); err != nil {
			return err
		}
		if err := lab.Dataplane(opts.Dataplane).Check(); err != nil {
			return fmt.Errorf("--dataplane %s: %w", opts.Dataplane, err)
		}
		if !opts.UI {
			return runInNetns(ctx, "lab run")
		}
		// The dashboard's listener is bound here, on the host's loopback,
		// and served by the run inside (a socket stays in the namespace it
		// was bound in).
		ln, err := listenUI(ctx, opts.UIAddr)
		if err != nil {
			return err
		}
		defer ln.Close()
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			return err
		}
		defer f.Close()
		return runInNetns(ctx, "lab run", f)
	}
	p, err := await(ctx, inputName(opts.File), func() (*plan.Plan, error) {
		if opts.File != "-" {
			return scenario.Open(ctx, opts.File)
		}
		data, err := scenario.ReadAll(ctx, inputName(opts.File), opts.In)
		if err != nil {
			return nil, fmt.Errorf("lab run: %w", err)
		}
		return scenario.Load(stdinName, data)
	})
	if errors.Is(err, scenario.ErrNotFound) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	if p, err = p.Select(opts.Variants); err != nil {
		return usageError{fmt.Errorf("--variant: %w", err)}
	}
	if dp := lab.Dataplane(opts.Dataplane); dp.KubeProxyMode() != "" {
		var left string
		if p, left, err = withoutIPVS(p, dp); err != nil {
			return err
		}
		if left != "" {
			fmt.Fprintln(opts.Err, left)
		}
	}
	if opts.Diagnose {
		if err := diagnoseFits(opts, p); err != nil {
			return err
		}
	}
	html, err := createHTML(opts.HTML)
	if err != nil {
		return err
	}
	ui, err := startUI(ctx, opts, p)
	if err != nil {
		html.discard()
		return err
	}
	if opts.CompareDataplanes {
		return compareDataplanes(ctx, opts, p)
	}
	ro := runner.Options{Sequential: opts.Sequential, Seed: opts.Seed}
	if onKube && lab.Dataplane(opts.Dataplane).KubeProxyMode() != "" && !opts.Sequential && len(p.Variants) > 1 {
		// Every variant's kube-proxy would own the same kernel tables (table
		// ip kube-proxy, the KUBE-* chains) of the one network namespace.
		fmt.Fprintf(opts.Err, "--dataplane %s: running the variants one after another (each variant's kube-proxy programs the same kernel tables of the lab's network namespace)\n", opts.Dataplane)
		ro.Sequential = true
	}
	if opts.Diagnose {
		ro.Diagnose = &runner.Diagnose{At: opts.DiagnoseAt, Window: opts.DiagnoseWindow}
	}
	if lvl, ok := logLevels[opts.LogLevel]; ok {
		ro.Logger = slog.New(slog.NewTextHandler(opts.Err, &slog.HandlerOptions{Level: lvl}))
	}
	if onKube {
		ro.AtOnce = maxControlPlanes
		if ro.ControlPlane, err = variantControlPlanes(ro.Logger, lab.Dataplane(opts.Dataplane)); err != nil {
			html.discard()
			return err
		}
	}
	var line func([]runner.Progress)
	if show(opts) {
		pl := &progressLine{w: opts.Err, live: isTerminal(opts.Err)}
		line = pl.update
		defer pl.finish()
	}
	ro.Progress = progress(line, ui)
	if ui != nil {
		ro.Live = ui.board
	}
	run, err := runner.Run(ctx, p, ro)
	if run == nil {
		html.discard()
		ui.finish(nil)
	}
	if errors.Is(err, runner.ErrTooMuch) || errors.Is(err, runner.ErrTooManyFiles) {
		return usageError{err}
	}
	if run != nil {
		res := report.New(p, run, judge(p, run))
		ui.finish(res)
		if werr := write(opts, res); werr != nil {
			return werr
		}
		if werr := html.write(res); werr != nil {
			return werr
		}
		if err == nil {
			err = outcome(opts, res)
		}
	}
	return err
}

// checkDiagnose checks the --diagnose flags; implied is true when a flag
// that implies --diagnose was given.
func (o *LabRunOptions) checkDiagnose(implied bool) error {
	o.Diagnose = o.Diagnose || implied
	switch {
	case o.DiagnoseAt < 0:
		return usageError{fmt.Errorf("--diagnose-at %v: want a time of load, 0 or more", o.DiagnoseAt)}
	case o.DiagnoseWindow < 100*time.Millisecond || o.DiagnoseWindow > 10*time.Minute:
		return usageError{fmt.Errorf("--diagnose-window %v: want 100ms to 10m", o.DiagnoseWindow)}
	}
	return nil
}

// diagnoseFits refuses a diagnosis whose window would not end before the
// scenario's load does.
func diagnoseFits(o *LabRunOptions, p *plan.Plan) error {
	if end := o.DiagnoseAt + o.DiagnoseWindow; end > p.Duration {
		return usageError{fmt.Errorf("--diagnose-at %v plus --diagnose-window %v ends after the scenario's %v of load; diagnose reads the pods while load runs", o.DiagnoseAt, o.DiagnoseWindow, p.Duration)}
	}
	return nil
}

// judge reads each variant's measurements (variants whose load never
// started have nothing to judge).
func judge(p *plan.Plan, run *runner.Result) []verdict.Verdict {
	out := make([]verdict.Verdict, len(run.Variants))
	for i, o := range run.Variants {
		if o.Started {
			out[i] = verdict.Judge(p, p.Variants[i], o.Summary)
		}
	}
	return out
}

func write(opts *LabRunOptions, res *report.Result) error {
	if opts.Output == "json" {
		return report.JSON(opts.Out, res)
	}
	return report.Text(opts.Out, res)
}

// outcome is the run's error for the exit code: a failed variant, failed
// expectations or failed timeline steps.
func outcome(opts *LabRunOptions, res *report.Result) error {
	failed, steps, invalid := 0, 0, 0
	for _, v := range res.Variants {
		if v.Error != "" {
			return fmt.Errorf("variant %s failed: %s", v.Name, v.Error)
		}
		failed += v.Failed()
		steps += len(v.StepErrors)
		invalid += v.Invalid()
	}
	where := "the FAIL lines"
	if opts.Output == "json" {
		where = `"checks" with "pass": false`
	}
	switch {
	case failed > 0 && steps > 0:
		return fmt.Errorf("%s failed (see %s) and %s failed", fmt.Sprintf("%d of the scenario's expectations", failed), where, plural(steps, "timeline step"))
	case failed > 0:
		return fmt.Errorf("%s failed (see %s)", fmt.Sprintf("%d of the scenario's expectations", failed), where)
	case steps > 0:
		return fmt.Errorf("%s failed (see \"step failed\" in the report)", plural(steps, "timeline step"))
	case invalid > 0:
		return overloadedError{fmt.Errorf("%d of the scenario's expectations could not be judged: the machine was overloaded (see OVERLOADED and INVALID in the report); run again on a quieter machine", invalid)}
	}
	return nil
}

var logLevels = map[string]slog.Level{"info": slog.LevelInfo, "debug": slog.LevelDebug}

func show(opts *LabRunOptions) bool {
	switch opts.Progress {
	case "on":
		return true
	case "off":
		return false
	}
	return isTerminal(opts.Err)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine renders scenario progress: one rewritten line on a terminal,
// otherwise a line every 10s and at each state change.
type progressLine struct {
	w     io.Writer
	live  bool
	last  string
	lastT time.Time
	wrote bool
}

func (p *progressLine) update(ps []runner.Progress) {
	var parts []string
	var states []string
	var elapsed, dur time.Duration
	for _, v := range ps {
		parts = append(parts, fmt.Sprintf("%s %s %d calls", v.Variant, v.State, v.Calls))
		if v.Failed > 0 {
			parts[len(parts)-1] += fmt.Sprintf(" (%d failed)", v.Failed)
		}
		states = append(states, v.State)
		elapsed, dur = max(elapsed, v.Elapsed), max(dur, v.Duration)
	}
	line := fmt.Sprintf("[%4.1fs/%.0fs] %s", elapsed.Seconds(), dur.Seconds(), strings.Join(parts, " | "))
	stateKey := strings.Join(states, ",")
	if p.live {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.wrote = true
		return
	}
	if stateKey != p.last || time.Since(p.lastT) >= 10*time.Second {
		fmt.Fprintln(p.w, line)
		p.last, p.lastT = stateKey, time.Now()
	}
}

func (p *progressLine) finish() {
	if p.live && p.wrote {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
