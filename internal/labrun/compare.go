package labrun

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/verdict"
)

// Comparison is `lab run --compare-dataplanes`'s outcome: both runs'
// results, by dataplane, and the figures side by side.
type Comparison struct {
	Fidelity *report.Fidelity          `json:"fidelity"`
	Runs     map[string]*report.Result `json:"runs"`
}

// Compare runs the scenario opts names on pinlab's dataplane, then on
// opts.Dataplane (a real one), each variant on its own real control plane,
// one after another in both runs (the real kube-proxy owns the namespace's
// kernel tables, one variant at a time, and the comparison wants both runs
// under the same conditions), with one seed, and puts the figures side by
// side. On the host it runs the command again in the network namespace,
// as Run does. The error is exit.Differ when a figure differs beyond its
// tolerance (the comparison is returned with it).
func Compare(ctx context.Context, opts Options) (*Comparison, error) {
	opts.ControlPlane = ControlPlaneKubernetes
	if kubelab.OnHost() {
		return nil, runOnHost(ctx, opts)
	}
	if opts.Seed == 0 {
		opts.Seed = rand.Uint64()
	}
	real := lab.Dataplane(opts.Dataplane)
	p, err := prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	var results []*report.Result
	for _, dp := range []lab.Dataplane{lab.DataplanePinlab, real} {
		note(opts.Notes, "--compare-dataplanes: running %s on the %s dataplane (seed %d) ...", p.Name, dp, opts.Seed)
		v, err := kubelab.NewVariants(dp, kubelab.PodNetwork(opts.PodNetwork), opts.Logger)
		if err != nil {
			return nil, err
		}
		ro := runner.Options{Sequential: true, Seed: opts.Seed, Logger: opts.Logger, Diagnose: opts.diagnose(), Progress: opts.Progress, Backend: controlPlanes{v}}
		run, err := runner.Run(ctx, p, ro)
		if err != nil {
			return nil, fmt.Errorf("--compare-dataplanes, the %s run: %w", dp, err)
		}
		results = append(results, report.New(p, run, verdict.JudgeRun(p, run)))
	}
	c := &Comparison{
		Fidelity: report.CompareDataplanes(string(lab.DataplanePinlab), results[0], string(real), results[1]),
		Runs:     map[string]*report.Result{string(lab.DataplanePinlab): results[0], string(real): results[1]},
	}
	if c.Fidelity.Differences > 0 {
		return c, exit.Differ
	}
	return c, nil
}
