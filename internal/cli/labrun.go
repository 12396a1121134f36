package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/labrun"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/scenarios"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	// package kubelab).
	ControlPlane string
	// Dataplane is what serves each variant's ClusterIPs and cluster DNS
	// on a real control plane: pinlab (its kube-proxy emulation and DNS),
	// kube-proxy-nftables or kube-proxy-iptables (the real kube-proxy and
	// the real CoreDNS).
	// Only with ControlPlane kubernetes.
	Dataplane string
	// PodNetwork is how a real control plane's pods are networked:
	// shared or netns (only with ControlPlane kubernetes).
	PodNetwork string
	// CompareDataplanes runs the scenario twice on real control planes,
	// on pinlab's dataplane and then on the real one (Dataplane, default
	// kube-proxy-nftables), variants one after another in both, and
	// prints the figures side by side (report.CompareDataplanes).
	CompareDataplanes bool
	// Diagnose runs pinlab diagnose in each variant's lab while its load
	// runs, on every Service its clients target: the first channelz
	// reading at DiagnoseAt of load (0: DiagnoseWindow plus 2s before the
	// end), the last DiagnoseWindow later (0: 5s). Setting either
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
Built-in scenarios: %s.

Exit codes: 0 done; 1 a failed expectation, timeline step or variant, or an
error; 2 bad flags, scenario name or variant, or a run too large for this
machine; 3 some expectations could not be judged
on an overloaded machine (-o json: "overloaded" is true whenever the load
generator fell behind its schedule for the machine's reasons, not the lab's
own bursts: the field scripts check); 6 with
--compare-dataplanes, a figure that differs; 130 interrupted.`, scenarios.Default, strings.Join(scenarios.Names(), ", ")),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return exit.UsageError(fmt.Errorf("lab run takes at most one scenario, got %d", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = scenarios.Default
			opts.In = cmd.InOrStdin()
			if len(args) == 1 {
				opts.File = args[0]
			}
			if err := opts.check(cmd.Flags()); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return labRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	reportFlags(f, &opts.Output, &opts.HTML, &opts.Progress, &opts.Variants)
	f.BoolVar(&opts.Sequential, "sequential", false, "run variants one after another instead of side by side")
	f.Uint64Var(&opts.Seed, "seed", 0, "seed for pod names, ClusterIPs and random picks (0: random, reported)")
	f.StringVar(&opts.LogLevel, "log-level", "off", "component logs on stderr: off, info or debug")
	f.BoolVar(&opts.UI, "ui", false, "serve a live dashboard on loopback while the run goes; its address, with a new token, is printed on stderr")
	f.StringVar(&opts.ControlPlane, "control-plane", controlPlaneEmbedded, "embedded (in-process API and controllers) or kubernetes (each variant on its own real etcd, kube-apiserver, kube-controller-manager and kube-scheduler, in a private network namespace; build them first with build/controlplane/build.sh)")
	f.StringVar(&opts.Dataplane, "dataplane", labrun.DataplanePinlab, dataplaneUsage)
	f.StringVar(&opts.PodNetwork, "pod-network", "shared", podNetworkUsage)
	f.BoolVar(&opts.CompareDataplanes, "compare-dataplanes", false, "run the scenario on real control planes twice, on pinlab's dataplane and on the real one (--dataplane, default kube-proxy-nftables), variants one after another, and print the figures side by side with the differences beyond tolerance marked (implies --control-plane kubernetes; exit 6 when they differ)")
	f.StringVar(&opts.UIAddr, "ui-addr", DefaultUIAddr, "address of the --ui dashboard (loopback; port 0 picks a free one)")
	f.BoolVar(&opts.Diagnose, "diagnose", false, "run pinlab diagnose in each variant's lab while its load runs, on every Service its clients target, and report its verdict")
	f.DurationVar(&opts.DiagnoseAt, "diagnose-at", 0, "time of load at which --diagnose takes its first reading (default: --diagnose-window plus 2s before the end); implies --diagnose")
	f.DurationVar(&opts.DiagnoseWindow, "diagnose-window", evidence.DefaultWindow, "time from --diagnose's first channelz reading of each pod to its last (one a second); implies --diagnose")
	return cmd
}

func labRun(ctx context.Context, opts *LabRunOptions) error {
	var line *progressLine
	if show(opts) {
		line = &progressLine{w: opts.Err, live: isTerminal(opts.Err)}
		defer line.finish()
	}
	eo := opts.engineOptions(line)
	if opts.CompareDataplanes {
		return compare(ctx, opts, eo)
	}
	// The HTML file is created once the scenario has been read and checked
	// (a bad scenario leaves a file already there alone), before the run,
	// so that a path that cannot be written fails at once.
	var html *htmlFile
	eo.Prepared = func() (err error) {
		html, err = createHTML(opts.HTML)
		return err
	}
	res, err := labrun.Run(ctx, eo)
	return finishRun(opts, html, res, err)
}

// finishRun prints a run's result as opts asks (Out, the HTML file) and
// returns the command's error: the run's, else what the result says
// failed (runError). Without a result, the HTML file is discarded.
func finishRun(opts *LabRunOptions, html *htmlFile, res *report.Result, err error) error {
	if res == nil {
		html.discard()
		return err
	}
	if werr := write(opts, res); werr != nil {
		return werr
	}
	if werr := html.write(res); werr != nil {
		return werr
	}
	if err == nil {
		err = runError(opts, res)
	}
	return err
}

// engineOptions are the engine's options for the flags; line, if not
// nil, shows the progress.
func (o *LabRunOptions) engineOptions(line *progressLine) labrun.Options {
	eo := labrun.Options{
		Scenario: o.File, In: o.In, ControlPlane: o.ControlPlane, Dataplane: o.Dataplane, PodNetwork: o.PodNetwork,
		Variants: o.Variants, Sequential: o.Sequential, Seed: o.Seed, UI: o.UI, UIAddr: o.UIAddr, Notes: o.Err,
	}
	if lvl, ok := logLevels[o.LogLevel]; ok {
		eo.Logger = slog.New(slog.NewTextHandler(o.Err, &slog.HandlerOptions{Level: lvl}))
	}
	eo.Diagnose, eo.DiagnoseAt, eo.DiagnoseWindow = o.Diagnose, o.DiagnoseAt, o.DiagnoseWindow
	if line != nil {
		eo.Progress = line.update
	}
	return eo
}

// check checks the flags (f says which were given) before anything
// starts; its errors are usage errors.
func (o *LabRunOptions) check(f *pflag.FlagSet) error {
	if f.Changed("html") && o.HTML == "" {
		return exit.UsageError(errors.New("--html: an empty path; give the report's file"))
	}
	if f.Changed("variant") && (len(o.Variants) == 0 || slices.Contains(o.Variants, "")) {
		return exit.UsageError(errors.New("--variant: an empty variant name; name one or more variants"))
	}
	if o.Output != "table" && o.Output != "json" {
		return exit.UsageError(fmt.Errorf("-o %q: expected table or json", o.Output))
	}
	if o.Progress != "auto" && o.Progress != "on" && o.Progress != "off" {
		return exit.UsageError(fmt.Errorf("--progress %q: expected auto, on or off", o.Progress))
	}
	if _, ok := logLevels[o.LogLevel]; !ok && o.LogLevel != "off" {
		return exit.UsageError(fmt.Errorf("--log-level %q: expected off, info or debug", o.LogLevel))
	}
	switch o.ControlPlane {
	case controlPlaneEmbedded:
	case controlPlaneKubernetes:
	default:
		return exit.UsageError(fmt.Errorf("--control-plane %q: expected %s or %s", o.ControlPlane, controlPlaneEmbedded, controlPlaneKubernetes))
	}
	if o.CompareDataplanes {
		if err := o.checkCompare(f.Changed("control-plane"), f.Changed("dataplane")); err != nil {
			return err
		}
	}
	if err := checkDataplane(o.Dataplane, f.Changed("dataplane") || o.CompareDataplanes, o.ControlPlane); err != nil {
		return err
	}
	if err := checkPodNetwork(o.PodNetwork, f.Changed("pod-network"), o.ControlPlane); err != nil {
		return err
	}
	if err := loopback.CheckAddr(o.UIAddr); err != nil {
		return exit.UsageError(fmt.Errorf("--ui-addr %q: expected IP:port inside 127.0.0.0/8 (%v)", o.UIAddr, err))
	}
	return o.checkDiagnose(f.Changed("diagnose-at") || f.Changed("diagnose-window"))
}

// checkDiagnose checks the --diagnose flags; implied is true when a flag
// that implies --diagnose was given.
func (o *LabRunOptions) checkDiagnose(implied bool) error {
	o.Diagnose = o.Diagnose || implied
	switch {
	case o.DiagnoseAt < 0:
		return exit.UsageError(fmt.Errorf("--diagnose-at %v: want a time of load, 0 or more", o.DiagnoseAt))
	case o.DiagnoseWindow < 100*time.Millisecond || o.DiagnoseWindow > 10*time.Minute:
		return exit.UsageError(fmt.Errorf("--diagnose-window %v: want 100ms to 10m", o.DiagnoseWindow))
	}
	return nil
}

func write(opts *LabRunOptions, res *report.Result) error {
	if opts.Output == "json" {
		return report.JSON(opts.Out, res)
	}
	return report.Text(opts.Out, res)
}

// runError is the run's error for the exit code: a failed variant, failed
// expectations or failed timeline steps.
func runError(opts *LabRunOptions, res *report.Result) error {
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
		return exit.OverloadedError(fmt.Errorf("%d of the scenario's expectations could not be judged: they were measured while the load generator fell behind (see OVERLOADED or BURST, and INVALID, in the report); run again on a quieter machine", invalid))
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

func (p *progressLine) update(ps []outcome.Progress) {
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

// reportFlags are the flags that lab run and cluster run share: which
// variants run and how the report is written.
func reportFlags(f *pflag.FlagSet, output, html, progress *string, variants *[]string) {
	f.StringVarP(output, "output", "o", "table", "output format: table or json (the full result)")
	f.StringSliceVar(variants, "variant", nil, "run only these variants (repeat or comma-separate)")
	f.StringVar(progress, "progress", "auto", "progress line on stderr: auto, on or off")
	f.StringVar(html, "html", "", "also write the report as one self-contained HTML page to this file")
}
