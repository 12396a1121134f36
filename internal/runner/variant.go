package runner

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/proxy"
	"github.com/pinlab/pinlab/internal/stats"
)

// variantRun is one variant in its own lab.
type variantRun struct {
	plan  *plan.Plan
	v     plan.Variant
	opts  Options
	seed  uint64
	tap   tap
	index int // in the plan's variants

	state   atomic.Value // string
	rec     atomic.Pointer[stats.Recorder]
	started atomic.Int64 // unix nanos of load start
	outcome Outcome      // written by run only
}

func (r *variantRun) progress() Progress {
	p := Progress{Variant: r.v.Name, State: r.state.Load().(string), Duration: r.plan.Duration}
	if s := r.started.Load(); s != 0 {
		p.Elapsed = min(time.Since(time.Unix(0, s)), r.plan.Duration)
	}
	if rec := r.rec.Load(); rec != nil {
		p.Calls, p.Failed = rec.Totals()
	}
	return p
}

func (r *variantRun) run(ctx context.Context) {
	r.outcome = Outcome{Variant: r.v.Name}
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

// labConfig is the variant's lab, its observers recording into rec.
func (r *variantRun) labConfig(rec *stats.Recorder, t tracker) lab.Config {
	dns := r.plan.DNS
	cfg := lab.Config{
		Seed: r.seed, Logger: r.opts.Logger,
		Waiting: func() { r.state.Store("waiting for a free address range") },
		DNS: clusterdns.Config{TTL: dns.TTL, FixedOrder: dns.FixedOrder, Pods: clusterdns.PodMode(dns.Pods),
			Cache: cacheConfig(dns.Cache), QueryLog: dnsObserver(rec)},
		Proxy: proxy.Config{Mode: proxy.Mode(r.v.Cluster.ProxyMode), OnConn: proxyObserver(rec)},
		Kubelet: kubelet.Config{Observe: t.observer(rec, r.tap), Events: podEvents(rec, r.tap),
			DeadAddress: r.v.Cluster.DeadAddress, RestartBackoff: r.v.Cluster.RestartBackoff},
	}
	if dns.TTL == 0 {
		cfg.DNS.TTL = -1 // no caching
	}
	return cfg
}

// cacheConfig is the cluster DNS's cache plugin for the plan's; nil for
// none.
func cacheConfig(c *plan.DNSCache) *clusterdns.CacheConfig {
	if c == nil {
		return nil
	}
	class := func(cl plan.DNSCacheClass) clusterdns.CacheClass {
		return clusterdns.CacheClass{Capacity: cl.Capacity, MaxTTL: cl.MaxTTL, MinTTL: cl.MinTTL, Disable: slices.Clone(cl.Disable)}
	}
	return &clusterdns.CacheConfig{Success: class(c.Success), Denial: class(c.Denial), KeepTTL: c.KeepTTL}
}

func (r *variantRun) execute(ctx context.Context) error {
	rec := stats.NewRecorder(time.Now())
	r.rec.Store(rec)
	t := tracker(r.v.Services())
	cfg := r.labConfig(rec, t)
	if r.opts.ControlPlane != nil {
		// Not bounded by the setup timeout: it may wait for another
		// variant's control plane to stop.
		r.state.Store("starting its control plane")
		api, stop, err := r.opts.ControlPlane(ctx, r.index)
		if err != nil {
			return fmt.Errorf("variant %s: %w", r.v.Name, err)
		}
		defer stop()
		cfg.API = api
		r.state.Store("starting")
	}
	setupCtx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	l, err := lab.Start(setupCtx, cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	r.outcome.DNS, r.outcome.PodCIDR = l.DNSAddr(), l.PodCIDR().String()
	if cfg.API != nil {
		r.outcome.Dataplane = string(l.Dataplane())
	}
	if err := l.WatchPods(newPodPhases(rec, t, r.tap).handlers()); err != nil {
		return err
	}
	if err := l.Apply(setupCtx, r.v.CopyObjects()); err != nil {
		return fmt.Errorf("variant %s: the lab's API rejected the objects: %w", r.v.Name, err)
	}
	if err := l.WaitReady(setupCtx); err != nil {
		return fmt.Errorf("variant %s: pods not ready within %v: %w", r.v.Name, setupTimeout, err)
	}
	r.outcome.ClusterIPs = clusterIPs(l, r.v)
	rec.Node(l.NodeIP())
	cl, err := newClients(setupCtx, l, rec, r.tap, r.v, r.seed)
	if err != nil {
		return err
	}
	r.drive(ctx, l, rec, cl)
	if err := l.Err(); err != nil {
		// The figures up to the failure are kept; the variant failed.
		return fmt.Errorf("variant %s: %w", r.v.Name, err)
	}
	return nil
}

// clusterIPs returns the ClusterIP of each target Service that has one.
func clusterIPs(l *lab.Lab, v plan.Variant) map[string]string {
	out := map[string]string{}
	for _, t := range v.Services() {
		if svc, err := l.Service(t.Namespace, t.Service); err == nil && !t.Headless {
			out[t.Key()] = svc.Spec.ClusterIP
		}
	}
	return out
}

// drive runs load for the plan's duration, applying timeline steps, then
// stops the clients (in-flight calls finish) and summarises.
func (r *variantRun) drive(ctx context.Context, l *lab.Lab, rec *stats.Recorder, cl *clients) {
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
	wg.Go(func() { cl.sched.Run(loadCtx) })
	wg.Go(func() { sampleCPU(loadCtx, rec) })
	for _, c := range cl.byIndex {
		wg.Go(func() { c.Run(loadCtx) })
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
func (r *variantRun) syncDNSLog(ctx context.Context, l *lab.Lab) {
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
		ev := LiveEvent{At: now, Text: text}
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
