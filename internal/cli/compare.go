package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/proxy"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/runner"
)

// ExitDataplanesDiffer: lab run --compare-dataplanes finished and some
// figure differs between the dataplanes beyond its tolerance.
const ExitDataplanesDiffer = 6

// checkCompare checks --compare-dataplanes against the other flags and
// fills in what it implies: the real control plane, and the real
// dataplane to compare with (kube-proxy-nftables unless --dataplane names
// the other).
func (o *LabRunOptions) checkCompare(controlPlaneSet, dataplaneSet bool) error {
	if controlPlaneSet && o.ControlPlane != controlPlaneKubernetes {
		return usageError{fmt.Errorf("--compare-dataplanes runs on --control-plane %s (the embedded control plane has pinlab's dataplane only)", controlPlaneKubernetes)}
	}
	o.ControlPlane = controlPlaneKubernetes
	if !dataplaneSet {
		o.Dataplane = string(lab.DataplaneKubeProxyNFTables)
	}
	if d, err := lab.ParseDataplane(o.Dataplane); err == nil && d.KubeProxyMode() == "" {
		return usageError{fmt.Errorf("--compare-dataplanes --dataplane %s: name the real dataplane to compare pinlab's with (kube-proxy-nftables or kube-proxy-iptables)", o.Dataplane)}
	}
	switch {
	case o.UI:
		return usageError{errors.New("--compare-dataplanes: the live dashboard shows one run; leave out --ui")}
	case o.HTML != "":
		return usageError{errors.New("--compare-dataplanes: the HTML report shows one run; use -o json for both runs and the comparison")}
	}
	return nil
}

// withoutIPVS leaves out of p the variants whose proxy mode is ipvs, which
// the real dataplane dp does not run (the real kube-proxy runs in nftables
// or iptables mode here; pinlab's dataplane emulates IPVS's schedulers),
// and says which it left out, and which iptables or nftables variants run
// in dp's mode instead of theirs ("" when neither). A usage error when no
// variant is left.
func withoutIPVS(p *plan.Plan, dp lab.Dataplane) (*plan.Plan, string, error) {
	var keep, left []string
	for _, v := range p.Variants {
		if v.Cluster.ProxyMode == string(proxy.ModeIPVS) {
			left = append(left, v.Name)
		} else {
			keep = append(keep, v.Name)
		}
	}
	var other []string // iptables or nftables variants the other mode runs
	for _, v := range p.Variants {
		if m := v.Cluster.ProxyMode; m != "" && m != string(proxy.ModeIPVS) && m != string(dp.KubeProxyMode()) {
			other = append(other, v.Name)
		}
	}
	var also string
	if len(other) > 0 {
		also = fmt.Sprintf("variant %s: its proxy mode runs as the real kube-proxy's %s mode (--dataplane %s), the one kube-proxy the lab runs", strings.Join(other, ", "), dp.KubeProxyMode(), dp)
	}
	if len(left) == 0 {
		return p, also, nil
	}
	why := fmt.Sprintf("proxy mode ipvs, which the real kube-proxy does not run here (--dataplane %s is %s mode); pinlab's dataplane emulates it: run it with --dataplane pinlab", dp, dp.KubeProxyMode())
	if len(keep) == 0 {
		return nil, "", usageError{fmt.Errorf("variant %s: %s", strings.Join(left, ", "), why)}
	}
	out, err := p.Select(keep)
	if err != nil {
		return nil, "", err
	}
	note := fmt.Sprintf("leaving out variant %s: %s", strings.Join(left, ", "), why)
	if also != "" {
		note += "\n" + also
	}
	return out, note, nil
}

// comparison is lab run --compare-dataplanes's JSON: both runs' results
// and the comparison.
type comparison struct {
	Fidelity *report.Fidelity          `json:"fidelity"`
	Runs     map[string]*report.Result `json:"runs"`
}

// compareDataplanes runs p on pinlab's dataplane, then on opts.Dataplane,
// each variant on its own real control plane, one after another, with one
// seed, and writes the figures side by side.
func compareDataplanes(ctx context.Context, opts *LabRunOptions, p *plan.Plan) error {
	if opts.Seed == 0 {
		opts.Seed = rand.Uint64()
	}
	var logger *slog.Logger
	if lvl, ok := logLevels[opts.LogLevel]; ok {
		logger = slog.New(slog.NewTextHandler(opts.Err, &slog.HandlerOptions{Level: lvl}))
	}
	real := lab.Dataplane(opts.Dataplane)
	var results []*report.Result
	for _, dp := range []lab.Dataplane{lab.DataplanePinlab, real} {
		fmt.Fprintf(opts.Err, "--compare-dataplanes: running %s on the %s dataplane (seed %d) ...\n", p.Name, dp, opts.Seed)
		// Sequential on both: the real kube-proxy owns the namespace's
		// kernel tables, one variant at a time, and the comparison wants
		// both runs under the same conditions.
		ro := runner.Options{Sequential: true, Seed: opts.Seed, Logger: logger}
		if opts.Diagnose {
			ro.Diagnose = &runner.Diagnose{At: opts.DiagnoseAt, Window: opts.DiagnoseWindow}
		}
		var err error
		if ro.ControlPlane, err = variantControlPlanes(logger, dp); err != nil {
			return err
		}
		if show(opts) {
			pl := &progressLine{w: opts.Err, live: isTerminal(opts.Err)}
			ro.Progress = progress(pl.update, nil)
			defer pl.finish()
		}
		run, err := runner.Run(ctx, p, ro)
		if err != nil {
			return fmt.Errorf("--compare-dataplanes, the %s run: %w", dp, err)
		}
		results = append(results, report.New(p, run, judge(p, run)))
	}
	f := report.CompareDataplanes(string(lab.DataplanePinlab), results[0], string(real), results[1])
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(comparison{Fidelity: f, Runs: map[string]*report.Result{string(lab.DataplanePinlab): results[0], string(real): results[1]}}); err != nil {
			return err
		}
	} else if err := report.FidelityText(opts.Out, f); err != nil {
		return err
	}
	if f.Differences > 0 {
		return exitCode(ExitDataplanesDiffer)
	}
	return nil
}
