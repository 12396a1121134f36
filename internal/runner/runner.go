// Package runner runs plans: each variant of a plan.Plan in its own lab
// (package lab), load clients driven along the timeline, and a
// stats.Recorder that sees pods, clients, kube-proxy and the cluster DNS.
// It returns what each variant measured; it never sees the scenario file,
// and it judges nothing (package verdict does).
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// setupTimeout bounds the wait for a variant's initial pods and data plane.
const setupTimeout = 60 * time.Second

// Options configure Run. The zero value runs every variant side by side
// (unless the plan is sequential) with a random seed.
type Options struct {
	// Sequential runs variants one after another instead of side by side.
	Sequential bool
	// AtOnce, when side by side, runs the variants in batches of at most
	// this many (each batch starts when the previous one has ended): 0
	// means lab.Ranges, the most labs one machine holds at once; larger
	// values are lowered to it. `lab run --control-plane kubernetes` sets
	// 4, one real control plane per variant.
	AtOnce int
	// Seed makes pod names, ClusterIPs and random picks repeatable; 0 picks
	// one (reported in the result).
	Seed uint64
	// Progress, if not nil, is called about twice a second, and once at the
	// end, from one goroutine.
	Progress func([]Progress)
	// Logger receives component logs; nil discards them.
	Logger *slog.Logger
	// Live, if not nil, is told about calls, client connections, pod
	// changes and timeline steps as they happen (see Live).
	Live Live
	// ControlPlane, if not nil, gives each variant's lab a real API server
	// instead of the embedded API and controllers (`lab run
	// --control-plane kubernetes`). It is called once per variant, with the
	// variant's index in the plan, concurrently when variants run side by
	// side, and may block until a control plane can start; it returns the
	// lab's API and stop, which the runner calls once the lab has closed.
	ControlPlane func(ctx context.Context, variant int) (api *lab.API, stop func() error, err error)
	// Diagnose, if not nil, collects diagnose's evidence in each
	// variant's lab while its load runs (see Diagnose); a diagnosis still
	// going at the end of the timeline keeps the load running until it
	// ends.
	Diagnose *Diagnose
}

// Progress is one variant's state for a progress line.
type Progress struct {
	Variant  string
	State    string // "waiting", "starting", "running", "done", "interrupted", "failed"
	Elapsed  time.Duration
	Duration time.Duration
	Calls    int64
	Failed   int64
}

// Result is what Run did: the seed it used, whether the variants ran side
// by side and in batches of how many, and each variant's outcome in the
// plan's order.
type Result struct {
	Seed       uint64
	SideBySide bool
	// Batch is how many variants ran at once when side by side: the
	// number of variants, or fewer when Options.AtOnce (or lab.Ranges)
	// split them into batches, one after another. 1 when sequential.
	Batch    int
	Variants []Outcome
}

// Outcome is how one variant's run went and what it measured.
type Outcome struct {
	Variant string
	// State is "done", "interrupted" (stopped early: Summary.End says how
	// far load got; windows not over by then are left out) or "failed"
	// (Error says why).
	State string
	Error string
	// DNS is the cluster DNS address ("IP:port"); PodCIDR the pod network.
	DNS, PodCIDR string
	// Dataplane is what served ClusterIPs on a real control plane
	// (lab.Dataplane: pinlab, kube-proxy-nftables, kube-proxy-iptables);
	// "" on the embedded one. Under the real kube-proxy the Summary's
	// proxy connections are the kernel's conntrack entries.
	Dataplane string
	// ClusterIPs maps each target Service ("namespace/name") with a
	// ClusterIP to it.
	ClusterIPs map[string]string
	// CPUPer1000 is the process's CPU time per 1000 finished calls while
	// the variant's load ran, in milliseconds; set only when variants ran
	// one after another (side by side the CPU is shared).
	CPUPer1000 *float64
	// Started is true when load started.
	Started bool
	Summary stats.Summary
	// Diagnoses are the evidence collected for each target Service when
	// Options.Diagnose was set, in the order of the variant's Services;
	// nil when no diagnosis was due before the run stopped.
	Diagnoses []Diagnosis
}

// ErrTooMuch is returned by Run when the variants side by side would offer
// more load or run more pods than one machine measures faithfully.
var ErrTooMuch = errors.New("too much for one run side by side")

// Run runs the plan's variants and returns their outcomes. Variants run side
// by side in separate labs (in batches of up to opts.AtOnce or
// lab.Ranges, whichever is smaller) unless
// opts.Sequential or the plan is sequential. A variant that fails to start
// is reported in its outcome; Run itself fails only when the variants side
// by side would be too much (ErrTooMuch) or when ctx ends (with the
// outcomes so far).
func Run(ctx context.Context, p *plan.Plan, opts Options) (*Result, error) {
	opts.Sequential = opts.Sequential || p.Sequential
	if !opts.Sequential {
		if err := checkSideBySide(p); err != nil {
			return nil, err
		}
	}
	if err := checkFiles(p, !opts.Sequential); err != nil {
		return nil, err
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
	batch := min(len(runs), lab.Ranges)
	if opts.AtOnce > 0 {
		batch = min(batch, opts.AtOnce)
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
	res := &Result{Seed: opts.Seed, SideBySide: !opts.Sequential, Batch: batch}
	for _, r := range runs {
		o := r.outcome
		if o.State == "" {
			o = Outcome{Variant: r.v.Name, State: "interrupted"}
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
func startProgress(report func([]Progress), runs []*variantRun) (stop func()) {
	if report == nil {
		return func() {}
	}
	snapshot := func() []Progress {
		out := make([]Progress, len(runs))
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
