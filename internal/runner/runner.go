// Package runner runs plans: each variant of a plan.Plan on its own cluster
// (a Backend's: the embedded lab, a real control plane, ...), load clients
// driven along the timeline, and a stats.Recorder that sees pods, clients,
// the dataplane and the cluster DNS through the cluster's Hooks.
// It returns what each variant measured (package outcome); it never sees
// the scenario file, and it judges nothing (package verdict does).
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
)

// SetupTimeout bounds the wait for a variant's initial pods and data plane,
// once its cluster has started; backends bound their own start with it
// too, once they have room.
const SetupTimeout = 60 * time.Second

// Options configure Run. Backend is required; with the other fields zero,
// Run runs every variant side by side (unless the plan is sequential)
// with a random seed.
type Options struct {
	// Sequential runs variants one after another instead of side by side.
	Sequential bool
	// Seed makes pod names, ClusterIPs and random picks repeatable; 0 picks
	// one (reported in the result).
	Seed uint64
	// Progress, if not nil, is called about twice a second, and once at the
	// end, from one goroutine.
	Progress func([]outcome.Progress)
	// Logger receives component logs; nil discards them.
	Logger *slog.Logger
	// Live, if not nil, is told about calls, client connections, pod
	// changes and timeline steps as they happen (see Live).
	Live Live
	// Backend starts each variant's cluster; required (see Backend).
	Backend Backend
	// OffMachine says that the clusters and their load clients run
	// elsewhere (a user's cluster, ClientHost): the checks of what one
	// machine measures faithfully (ErrTooMuch, ErrTooManyFiles) are then
	// skipped, and this machine's CPU is not sampled (its load does not
	// judge the figures; the clients' schedule lag still does).
	OffMachine bool
	// SetupTimeout bounds each variant's setup once its cluster started
	// (its initial pods, its clients); 0 is SetupTimeout. A real
	// cluster's pods pull an image and get scheduled.
	SetupTimeout time.Duration
	// Diagnose, if not nil, collects diagnose's evidence in each
	// variant's lab while its load runs (see Diagnose); a diagnosis still
	// going at the end of the timeline keeps the load running until it
	// ends.
	Diagnose *Diagnose
}

// checkMachine refuses a run this machine cannot measure faithfully.
func checkMachine(p *plan.Plan, sequential bool) error {
	if !sequential {
		if err := checkSideBySide(p); err != nil {
			return err
		}
	}
	return checkFiles(p, !sequential)
}

// ErrTooMuch is returned by Run when the variants side by side would offer
// more load or run more pods than one machine measures faithfully.
var ErrTooMuch = errors.New("too much for one run side by side")

// Run runs the plan's variants and returns their outcomes. Variants run side
// by side, each on its own cluster from opts.Backend (in batches of up to
// its MaxClusters), unless opts.Sequential or the plan is sequential. A variant that fails to start
// is reported in its outcome; Run itself fails only when the variants side
// by side would be too much (ErrTooMuch) or when ctx ends (with the
// outcomes so far).
func Run(ctx context.Context, p *plan.Plan, opts Options) (*outcome.Run, error) {
	if opts.Backend == nil {
		return nil, errors.New("runner: Options.Backend is nil")
	}
	opts.Sequential = opts.Sequential || p.Sequential
	if !opts.OffMachine {
		if err := checkMachine(p, opts.Sequential); err != nil {
			return nil, err
		}
	}
	if opts.SetupTimeout == 0 {
		opts.SetupTimeout = SetupTimeout
	}
	if opts.Seed == 0 {
		opts.Seed = rand.Uint64()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// Process-wide in grpc-go: runs in one process with different values
	// take turns; runs with the same value share it.
	release, err := minResolution.hold(ctx, p.MinResolutionInterval)
	if err != nil {
		return nil, fmt.Errorf("runner: interrupted while waiting for another run's grpc settings: %w", err)
	}
	defer release()
	runs := make([]*variantRun, len(p.Variants))
	for i, v := range p.Variants {
		runs[i] = &variantRun{plan: p, v: v, opts: opts, seed: opts.Seed + uint64(i)*7919, tap: tap{opts.Live, i}, index: i}
		runs[i].state.Store("waiting")
	}
	stopProgress := startProgress(opts.Progress, runs)
	batch := len(runs)
	if n := opts.Backend.MaxClusters(); n > 0 {
		batch = min(batch, n)
	}
	if opts.Sequential {
		batch = 1
	}
	for start := 0; start < len(runs) && ctx.Err() == nil; start += batch {
		var wg sync.WaitGroup
		for _, r := range runs[start:min(start+batch, len(runs))] {
			wg.Go(func() { r.run(ctx) })
		}
		wg.Wait()
	}
	stopProgress()
	res := &outcome.Run{Seed: opts.Seed, SideBySide: !opts.Sequential, Batch: batch}
	for _, r := range runs {
		o := r.outcome
		if o.State == "" {
			o = outcome.Variant{Variant: r.v.Name, State: "interrupted"}
		}
		res.Variants = append(res.Variants, o)
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("runner: interrupted: %w", context.Cause(ctx))
	}
	return res, nil
}

// checkSideBySide refuses variants that together would offer more than
// plan.MaxOfferedLoad or run more than plan.MaxPods.
func checkSideBySide(p *plan.Plan) error {
	var calls float64
	var pods int
	for _, v := range p.Variants {
		calls += v.OfferedLoad
		pods += v.PeakPods
	}
	if calls > plan.MaxOfferedLoad {
		return fmt.Errorf("runner: the %d variants side by side offer %.0f calls/s together, more than %d; run them with --sequential or lower the rates: %w",
			len(p.Variants), calls, plan.MaxOfferedLoad, ErrTooMuch)
	}
	if pods > plan.MaxPods {
		return fmt.Errorf("runner: the %d variants side by side would run up to %d pods together, more than %d; run them with --sequential: %w",
			len(p.Variants), pods, plan.MaxPods, ErrTooMuch)
	}
	return nil
}

// startProgress calls report every 500ms until the returned stop is called,
// which reports once more and waits.
func startProgress(report func([]outcome.Progress), runs []*variantRun) (stop func()) {
	if report == nil {
		return func() {}
	}
	snapshot := func() []outcome.Progress {
		out := make([]outcome.Progress, len(runs))
		for i, r := range runs {
			out[i] = r.progress()
		}
		return out
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				report(snapshot())
				return
			case <-t.C:
				report(snapshot())
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
