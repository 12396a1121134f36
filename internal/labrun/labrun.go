// Package labrun is the engine behind `pinlab lab run`: it reads a
// scenario into a plan (package scenario), fits it to the options (the
// variants asked for, the dataplane, a diagnosis), picks the runner's
// backend (the embedded lab, or a real control plane per variant, see
// backend.go), runs the plan (package runner), judges each variant
// (package verdict, and package diagnose for the diagnoses) and returns
// the report.Result that the CLI prints. On a real control plane the
// command first runs itself in the lab's network namespace (package
// kubelab). Compare runs one plan on both dataplanes.
//
// Errors that are mistakes in how the command was called are marked
// exit.UsageError; a run whose process in the namespace ended with a
// code returns that exit.Code.
package labrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/verdict"
)

// The control planes a lab runs on (Options.ControlPlane).
const (
	ControlPlaneEmbedded   = "embedded"
	ControlPlaneKubernetes = "kubernetes"
)

// The dataplanes (Options.Dataplane; lab.Dataplanes): DataplanePinlab,
// the default, and the real ones, the real kube-proxy in a mode with the
// real CoreDNS; DataplaneReal is the one Compare compares with unless
// told.
const (
	DataplanePinlab = string(lab.DataplanePinlab)
	DataplaneReal   = string(lab.DataplaneKubeProxyNFTables)
)

// CheckDataplane checks a dataplane's name (set: the user gave it): a
// known one, and a real one only with ControlPlaneKubernetes (pinlab's goes
// with either).
func CheckDataplane(name string, set bool, controlPlane string) error {
	dp, err := lab.ParseDataplane(name)
	if err != nil {
		return fmt.Errorf("--dataplane: %w", err)
	}
	if set && controlPlane != ControlPlaneKubernetes && dp != lab.DataplanePinlab {
		return fmt.Errorf("--dataplane %s needs --control-plane %s: the embedded control plane always runs pinlab's dataplane", name, ControlPlaneKubernetes)
	}
	return nil
}

// CheckPodNetwork checks a --pod-network value (set: the user gave it):
// shared or netns, and netns only with ControlPlaneKubernetes.
func CheckPodNetwork(name string, set bool, controlPlane string) error {
	pn, err := kubelab.ParsePodNetwork(name)
	if err == nil && set && name == "" {
		err = fmt.Errorf("an empty value: expected %s or %s", kubelab.PodNetworkShared, kubelab.PodNetworkNetns)
	}
	if err != nil {
		return fmt.Errorf("--pod-network: %w", err)
	}
	if set && controlPlane != ControlPlaneKubernetes && pn != kubelab.PodNetworkShared {
		return fmt.Errorf("--pod-network %s needs --control-plane %s: the embedded lab's pods share the host's loopback", name, ControlPlaneKubernetes)
	}
	return nil
}

// IsReal reports whether the dataplane name names the real kube-proxy and
// CoreDNS.
func IsReal(dataplane string) bool { return lab.Dataplane(dataplane).KubeProxyMode() != "" }

// Options configure Run and Compare.
type Options struct {
	// Scenario is a scenario file's path, a built-in's name, or "-" for
	// In.
	Scenario string
	In       io.Reader
	// ControlPlane is ControlPlaneEmbedded (the in-process API and
	// controllers; "" means it too) or ControlPlaneKubernetes (each
	// variant on its own real control plane, in the lab's network
	// namespace).
	ControlPlane string
	// Dataplane serves each variant's ClusterIPs and cluster DNS on a real
	// control plane (lab.Dataplanes; "" is pinlab's). A real one runs the
	// variants one after another: each variant's kube-proxy would own the
	// same kernel tables of the one network namespace.
	Dataplane string
	// PodNetwork is how a real control plane's pods are networked:
	// "shared" ("" too: the lab's namespace, addresses local on lo) or
	// "netns" (a network namespace per pod on a bridge, package podnet).
	PodNetwork string
	// Variants, if not empty, are the variants to run, in this order.
	Variants []string
	// Sequential runs variants one after another instead of side by side.
	Sequential bool
	// Seed makes pod names, ClusterIPs and random picks repeatable; 0
	// picks one (reported in the result).
	Seed uint64
	// Logger receives component logs; nil discards them.
	Logger *slog.Logger
	// Diagnose runs pinlab diagnose in each variant's lab while its load
	// runs: its first reading DiagnoseAt into the load (0: as late as the
	// run allows), the last DiagnoseWindow later (0:
	// evidence.DefaultWindow); they must end before the load does.
	Diagnose                   bool
	DiagnoseAt, DiagnoseWindow time.Duration
	// Progress, if not nil, is called about twice a second from one
	// goroutine (runner.Options.Progress).
	Progress func([]outcome.Progress)
	// UI serves the live dashboard at UIAddr (inside 127.0.0.0/8; port 0
	// picks one) while the run goes, and says its address on Notes.
	UI     bool
	UIAddr string
	// Prepared, if not nil, is called once the scenario is read and fits
	// the options, before anything starts (inside the network namespace
	// on a real control plane): the place to claim an output file. Its
	// error stops the run.
	Prepared func() error
	// Notes, if not nil, is told what the run changed or left out of the
	// scenario (variants a dataplane does not run) and where the
	// dashboard is, a line each.
	Notes io.Writer
}

// Run runs the scenario opts names and judges it. On the host with
// ControlPlaneKubernetes it runs the whole command again in a new network
// namespace instead, and returns nil or the exit.Code it ended with.
// Otherwise it returns the result of every variant that started, even
// with an error (a failed variant, an interruption); the result is nil
// when nothing ran.
func Run(ctx context.Context, opts Options) (*report.Result, error) {
	if opts.ControlPlane == ControlPlaneKubernetes && kubelab.OnHost() {
		return nil, runOnHost(ctx, opts)
	}
	p, err := prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	ro, err := runnerOptions(opts, p)
	if err != nil {
		return nil, err
	}
	if opts.Prepared != nil {
		if err := opts.Prepared(); err != nil {
			return nil, err
		}
	}
	ui, err := startUI(ctx, opts, p)
	if err != nil {
		return nil, err
	}
	ro.Progress, ro.Live = ui.progress(opts.Progress), ui.live()
	run, err := runner.Run(ctx, p, ro)
	if errors.Is(err, runner.ErrTooMuch) || errors.Is(err, runner.ErrTooManyFiles) {
		err = exit.UsageError(err)
	}
	if run == nil {
		ui.finish(nil)
		return nil, err
	}
	res := report.New(p, run, verdict.JudgeRun(p, run))
	ui.finish(res)
	return res, err
}

// prepare reads the scenario and fits its plan to opts, before anything
// starts.
func prepare(ctx context.Context, opts Options) (*plan.Plan, error) {
	p, err := scenario.OpenInput(ctx, opts.Scenario, opts.In)
	if errors.Is(err, scenario.ErrNotFound) {
		return nil, exit.UsageError(err)
	}
	if err != nil {
		return nil, err
	}
	if p, err = p.Select(opts.Variants); err != nil {
		return nil, exit.UsageError(fmt.Errorf("--variant: %w", err))
	}
	if p, err = forDataplane(p, lab.Dataplane(opts.Dataplane), opts.Notes); err != nil {
		return nil, err
	}
	if opts.Diagnose && !p.FitsDiagnosis(opts.DiagnoseAt, opts.DiagnoseWindow) {
		return nil, exit.UsageError(fmt.Errorf("--diagnose-at %v plus --diagnose-window %v ends after the scenario's %v of load; diagnose reads the pods while load runs", opts.DiagnoseAt, opts.DiagnoseWindow, p.Duration))
	}
	return p, nil
}

// forDataplane fits p to the real dataplane dp (p as it is under
// pinlab's), and says on notes which variants it left out or runs in
// another proxy mode.
func forDataplane(p *plan.Plan, dp lab.Dataplane, notes io.Writer) (*plan.Plan, error) {
	mode := string(dp.KubeProxyMode())
	if mode == "" {
		return p, nil
	}
	why := fmt.Sprintf("proxy mode ipvs, which the real kube-proxy does not run here (--dataplane %s is %s mode); pinlab's dataplane emulates it: run it with --dataplane pinlab", dp, mode)
	fit, err := p.ForKubeProxy(mode)
	if errors.Is(err, plan.ErrNoVariantLeft) {
		return nil, exit.UsageError(fmt.Errorf("variant %s: %s", strings.Join(p.VariantNames(), ", "), why))
	}
	if err != nil {
		return nil, err
	}
	if len(fit.LeftOut) > 0 {
		note(notes, "leaving out variant %s: %s", strings.Join(fit.LeftOut, ", "), why)
	}
	if len(fit.OtherMode) > 0 {
		note(notes, "variant %s: its proxy mode runs as the real kube-proxy's %s mode (--dataplane %s), the one kube-proxy the lab runs", strings.Join(fit.OtherMode, ", "), mode, dp)
	}
	return fit.Plan, nil
}

// runnerOptions picks the runner's backend and settings for opts.
func runnerOptions(opts Options, p *plan.Plan) (runner.Options, error) {
	ro := runner.Options{Sequential: opts.Sequential, Seed: opts.Seed, Logger: opts.Logger, Diagnose: opts.diagnose(), Backend: Embedded()}
	if opts.ControlPlane != ControlPlaneKubernetes {
		return ro, nil
	}
	v, err := kubelab.NewVariants(lab.Dataplane(opts.Dataplane), kubelab.PodNetwork(opts.PodNetwork), opts.Logger)
	if err != nil {
		return ro, err
	}
	ro.Backend = controlPlanes{v}
	if IsReal(opts.Dataplane) && !opts.Sequential && len(p.Variants) > 1 {
		// Every variant's kube-proxy would own the same kernel tables
		// (table ip kube-proxy, the KUBE-* chains) of the one network
		// namespace.
		note(opts.Notes, "--dataplane %s: running the variants one after another (each variant's kube-proxy programs the same kernel tables of the lab's network namespace)", opts.Dataplane)
		ro.Sequential = true
	}
	return ro, nil
}

// diagnose is the runner's Diagnose for opts; nil without Diagnose.
func (opts Options) diagnose() *runner.Diagnose {
	if !opts.Diagnose {
		return nil
	}
	return &runner.Diagnose{At: opts.DiagnoseAt, Window: opts.DiagnoseWindow}
}

// note writes one line on w, if not nil.
func note(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
