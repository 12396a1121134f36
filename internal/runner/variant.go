package runner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// variantRun is one variant on its own cluster.
type variantRun struct {
	plan  *plan.Plan
	v     plan.Variant
	opts  Options
	seed  uint64
	tap   tap
	index int // in the plan's variants

	state   atomic.Value // string
	rec     atomic.Pointer[stats.Recorder]
	started atomic.Int64    // unix nanos of load start
	outcome outcome.Variant // written by run only
}

func (r *variantRun) progress() outcome.Progress {
	p := outcome.Progress{Variant: r.v.Name, State: r.state.Load().(string), Duration: r.plan.Duration}
	if s := r.started.Load(); s != 0 {
		p.Elapsed = min(time.Since(time.Unix(0, s)), r.plan.Duration)
	}
	if rec := r.rec.Load(); rec != nil {
		p.Calls, p.Failed = rec.Totals()
	}
	return p
}

func (r *variantRun) run(ctx context.Context) {
	r.outcome = outcome.Variant{Variant: r.v.Name}
	r.state.Store("starting")
	err := r.execute(ctx)
	switch {
	case ctx.Err() != nil:
		// Stopped by the user (or the caller's deadline), whatever the
		// component that noticed first said.
		r.outcome.State = "interrupted"
	case err != nil:
		r.outcome.State, r.outcome.Error = "failed", err.Error()
	default:
		r.outcome.State = "done"
	}
	r.state.Store(r.outcome.State)
}

// setup is what the variant's cluster is started with, its hooks
// recording into rec.
func (r *variantRun) setup(rec *stats.Recorder, t tracker) Setup {
	return Setup{
		Index: r.index, Variant: r.v, DNS: r.plan.DNS, Seed: r.seed, Logger: r.opts.Logger,
		State: func(s string) { r.state.Store(s) },
		Hooks: Hooks{Pod: t.observer(rec, r.tap), PodEvent: podEvents(rec, r.tap), DNSQuery: dnsObserver(rec), Conn: proxyObserver(rec)},
	}
}

func (r *variantRun) execute(ctx context.Context) error {
	rec := stats.NewRecorder(time.Now())
	r.rec.Store(rec)
	t := tracker(r.v.Services())
	// Not bounded by the setup timeout: the backend may wait for room
	// (another variant's address range or control plane).
	c, err := r.opts.Backend.Start(ctx, r.setup(rec, t))
	if err != nil {
		return fmt.Errorf("variant %s: %w", r.v.Name, err)
	}
	defer c.Close()
	r.state.Store("starting")
	setupCtx, cancel := context.WithTimeout(ctx, r.opts.SetupTimeout)
	defer cancel()
	r.outcome.DNS = c.DNSAddr()
	if p := c.PodCIDR(); p.IsValid() {
		r.outcome.PodCIDR = p.String()
	}
	if d, ok := c.(dataplaneNamer); ok {
		r.outcome.Dataplane = d.DataplaneName()
	}
	if _, err := c.Informers().Core().V1().Pods().Informer().AddEventHandler(newPodPhases(rec, t, r.tap).handlers()); err != nil {
		return err
	}
	if err := c.Apply(setupCtx, r.v.CopyObjects()); err != nil {
		return fmt.Errorf("variant %s: the cluster's API rejected the objects: %w", r.v.Name, err)
	}
	if err := c.WaitReady(setupCtx); err != nil {
		if setupCtx.Err() == nil { // a pod that will never be ready
			return fmt.Errorf("variant %s: pods not ready: %w", r.v.Name, err)
		}
		return fmt.Errorf("variant %s: pods not ready within %v: %w", r.v.Name, r.opts.SetupTimeout, err)
	}
	r.outcome.ClusterIPs = clusterIPs(c, r.v)
	rec.Node(c.NodeIP())
	cl, err := r.startClients(setupCtx, c, rec)
	if err != nil {
		return err
	}
	r.drive(ctx, c, rec, cl)
	if err := c.Err(); err != nil {
		// The figures up to the failure are kept; the variant failed.
		return fmt.Errorf("variant %s: %w", r.v.Name, err)
	}
	return nil
}

// startClients starts the variant's load clients: the cluster's own
// (ClientHost) when it runs them, else the runner's.
func (r *variantRun) startClients(ctx context.Context, c Cluster, rec *stats.Recorder) (loadClients, error) {
	if h, ok := c.(ClientHost); ok {
		return startHosted(ctx, h, rec, r.tap, r.v)
	}
	return newClients(ctx, c, rec, r.tap, r.v, r.seed)
}

// clusterIPs returns the ClusterIP of each target Service that has one.
func clusterIPs(c Cluster, v plan.Variant) map[string]string {
	out := map[string]string{}
	svcs := c.Informers().Core().V1().Services().Lister()
	for _, t := range v.Services() {
		if svc, err := svcs.Services(t.Namespace).Get(t.Service); err == nil && !t.Headless && !t.XDS {
			out[t.Key()] = svc.Spec.ClusterIP
		}
	}
	return out
}

// drive runs load for the plan's duration, applying timeline steps, then
// stops the clients (in-flight calls finish) and summarises.
func (r *variantRun) drive(ctx context.Context, l Cluster, rec *stats.Recorder, cl loadClients) {
	start := time.Now()
	rec.SetStart(start)
	r.started.Store(start.UnixNano())
	r.outcome.Started = true
	r.state.Store("running")
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	// A part of the lab that stopped (Lab.Failed: kube-proxy, CoreDNS, a
	// control plane process) ends the run: what follows would measure a
	// lab that no longer follows its API.
	wg.Go(func() {
		select {
		case <-l.Failed():
			stopLoad()
		case <-loadCtx.Done():
		}
	})
	wg.Go(func() { cl.run(loadCtx, start) })
	if !r.opts.OffMachine {
		// This machine's CPU is the load's only when the load runs here;
		// a cluster's clients report their own schedule lag.
		wg.Go(func() { sampleCPU(loadCtx, rec) })
	}
	var diag sync.WaitGroup
	if r.opts.Diagnose != nil {
		diag.Go(func() { r.outcome.Diagnoses = r.diagnose(loadCtx, l, start) })
	}
	cpu0 := processCPU()
	r.timeline(loadCtx, plan.Env{Workloads: workloads{l}, Pods: pods{l, rec}, Clients: cl}, rec, start)
	reached := min(time.Since(start), r.plan.Duration)
	cpu := processCPU() - cpu0
	diag.Wait() // the diagnosis's readings need the load running
	stopLoad()
	wg.Wait()
	cl.close()
	r.syncDNSLog(ctx, l)
	// Only windows that ended before an interruption are reported: a window
	// cut short would compare unlike with the others.
	var windows []stats.Window
	for _, w := range r.plan.Windows {
		if w.To <= reached {
			windows = append(windows, w)
		}
	}
	r.outcome.Summary = rec.Summarize(windows, reached)
	if r.opts.Sequential { // alone in the process, the process's CPU is this variant's
		if calls, _ := rec.Totals(); calls > 0 {
			v := cpu.Seconds() * 1000 / float64(calls) * 1000
			r.outcome.CPUPer1000 = &v
		}
	}
}

// syncDNSLog waits, for a few seconds at most, until the cluster DNS's
// query log holds every answer sent so far: CoreDNS's (the real dataplane)
// come through dnstap up to a second late; pinlab's DNS logs as it
// answers.
func (r *variantRun) syncDNSLog(ctx context.Context, l Cluster) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dnsLogSync)
	defer cancel()
	if err := l.SyncDNSLog(ctx); err != nil && r.opts.Logger != nil {
		r.opts.Logger.Warn("the cluster DNS's query log may miss the last answers", "variant", r.v.Name, "err", err)
	}
}

// dnsLogSync bounds syncDNSLog.
const dnsLogSync = 5 * time.Second

// timeline applies the steps at their offsets and returns when the run's
// duration is over (or ctx ends).
func (r *variantRun) timeline(ctx context.Context, env plan.Env, rec *stats.Recorder, start time.Time) {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	wait := func(at time.Duration) bool {
		t.Reset(time.Until(start.Add(at)))
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for _, st := range r.v.Steps {
		if !wait(st.At) {
			return
		}
		pod, err := st.Action.Apply(ctx, env)
		text := st.Describe()
		if a, ok := st.Action.(plan.PodAction); ok && pod != "" && a.Pod.Name == "" {
			text += " (" + pod + ")"
		}
		now := time.Now()
		rec.Step(st.Name, text, pod, err, now)
		ev := outcome.LiveEvent{At: now, Text: text}
		if err != nil {
			ev.Err = err.Error()
		}
		r.tap.event(ev)
	}
	wait(r.plan.Duration)
}

// processCPU returns the CPU time (user and system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
