package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/proxy"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/stats"
	grpcdns "google.golang.org/grpc/resolver/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// DefaultMinResolutionInterval is grpc-go's own minimum time between DNS
// resolutions of a channel.
const DefaultMinResolutionInterval = 30 * time.Second

// setupTimeout bounds the wait for a variant's initial pods and data plane.
const setupTimeout = 60 * time.Second

// Options configure Run. The zero value runs every variant side by side.
type Options struct {
	// Sequential runs variants one after another instead of side by side.
	Sequential bool
	// Variants selects variants by name; empty means all.
	Variants []string
	// Seed makes pod names, ClusterIPs and random picks repeatable; 0 picks
	// one (reported in the result).
	Seed uint64
	// Progress, if not nil, is called about twice a second, and once at the
	// end, from one goroutine.
	Progress func([]Progress)
	// Logger receives component logs; nil discards them.
	Logger *slog.Logger
}

// Progress is one variant's state for a progress line.
type Progress struct {
	Variant  string
	State    string // "starting", "running", "done", "failed"
	Elapsed  time.Duration
	Duration time.Duration
	Calls    int64
	Failed   int64
}

// Run runs the file's variants and returns their results. Variants run side
// by side in separate mini-clusters (up to lab.Ranges at a time) unless
// opts.Sequential. A variant that fails to start is reported in its result;
// Run itself fails only for bad options or when ctx ends.
func Run(ctx context.Context, f *File, opts Options) (*report.Result, error) {
	plans, err := selectPlans(f.Plans(), opts.Variants)
	if err != nil {
		return nil, err
	}
	if f.Scenario.Spec.Sequential {
		opts.Sequential = true
	}
	if !opts.Sequential {
		var calls float64
		var pods int
		for _, p := range plans {
			for _, c := range p.Clients {
				calls += c.Rate
			}
			pods += f.peakPods(p)
		}
		if calls > MaxOfferedLoad {
			return nil, fmt.Errorf("scenario: the %d variants side by side offer %.0f calls/s together, more than %d; run them with --sequential or lower the rates", len(plans), calls, MaxOfferedLoad)
		}
		if pods > MaxPods {
			return nil, fmt.Errorf("scenario: the %d variants side by side would run up to %d pods together, more than %d; run them with --sequential", len(plans), pods, MaxPods)
		}
	}
	if opts.Seed == 0 {
		opts.Seed = rand.Uint64()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	sp := f.Scenario.Spec
	minRes := DefaultMinResolutionInterval
	if sp.GRPC.MinResolutionInterval != nil {
		minRes = sp.GRPC.MinResolutionInterval.Duration
	}
	// Process-wide in grpc-go: runs in one process with different values
	// take turns; runs with the same value share it.
	release, err := minResolution.hold(ctx, minRes)
	if err != nil {
		return nil, fmt.Errorf("scenario: interrupted while waiting for another run's grpc settings: %w", err)
	}
	defer release()
	res := &report.Result{
		Scenario: f.Scenario.Metadata.Name, Description: sp.Description, Source: f.Name,
		Duration: sp.Duration.Duration.Seconds(), Seed: opts.Seed, SideBySide: !opts.Sequential,
		MinResolve: minRes.Seconds(), DNSTTL: 5,
	}
	if sp.DNS.TTL != nil {
		res.DNSTTL = sp.DNS.TTL.Duration.Seconds()
	}
	for _, w := range plans[0].Windows {
		res.Windows = append(res.Windows, report.WindowSpec{Name: w.Name, From: w.From.Seconds(), To: w.To.Seconds()})
	}
	for _, st := range sp.Timeline {
		res.Steps = append(res.Steps, st.describe())
	}
	runs := make([]*variantRun, len(plans))
	for i, p := range plans {
		runs[i] = &variantRun{file: f, plan: p, opts: opts, seed: opts.Seed + uint64(i)*7919}
		runs[i].state.Store("waiting")
	}
	stopProgress := startProgress(opts.Progress, runs)
	batch := lab.Ranges
	if opts.Sequential {
		batch = 1
	}
	for start := 0; start < len(runs); start += batch {
		var wg sync.WaitGroup
		for _, r := range runs[start:min(start+batch, len(runs))] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.run(ctx)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			break
		}
	}
	stopProgress()
	for _, r := range runs {
		res.Variants = append(res.Variants, r.result)
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("scenario: interrupted: %w", context.Cause(ctx))
	}
	return res, nil
}

// ErrBadVariant is returned by Run when Options.Variants names a variant
// twice or one the file does not have.
var ErrBadVariant = errors.New("bad variant selection")

func selectPlans(all []Plan, names []string) ([]Plan, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []Plan
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return nil, fmt.Errorf("scenario: variant %q selected twice: %w", n, ErrBadVariant)
		}
		seen[n] = true
		i := slices.IndexFunc(all, func(p Plan) bool { return p.Name == n })
		if i < 0 {
			var have []string
			for _, p := range all {
				have = append(have, p.Name)
			}
			return nil, fmt.Errorf("scenario: no variant %q (variants: %s): %w", n, strings.Join(have, ", "), ErrBadVariant)
		}
		out = append(out, all[i])
	}
	return out, nil
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

// minResolution arbitrates grpc-go's process-wide minimum re-resolution
// interval between concurrent runs.
var minResolution = &sharedSetting{set: grpcdns.SetMinResolutionInterval}

// sharedSetting is a process-wide value that concurrent holders must agree
// on: hold waits until the value is free or already what the caller needs.
type sharedSetting struct {
	set func(time.Duration)

	mu      sync.Mutex
	value   time.Duration
	holders int
	changed chan struct{} // closed and replaced when holders drops to 0
}

func (s *sharedSetting) hold(ctx context.Context, v time.Duration) (release func(), err error) {
	for {
		s.mu.Lock()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		if s.holders == 0 || s.value == v {
			if s.holders == 0 {
				s.value = v
				s.set(v)
			}
			s.holders++
			s.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					s.mu.Lock()
					defer s.mu.Unlock()
					if s.holders--; s.holders == 0 {
						close(s.changed)
						s.changed = make(chan struct{})
					}
				})
			}, nil
		}
		wait := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-wait:
		}
	}
}

// processCPU returns the CPU time (user and system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// variantRun is one variant in its own lab.
type variantRun struct {
	file *File
	plan Plan
	opts Options
	seed uint64

	state   atomic.Value // string
	rec     atomic.Pointer[stats.Recorder]
	started atomic.Int64 // unix nanos of load start
	result  report.Variant
}

func (r *variantRun) progress() Progress {
	p := Progress{Variant: r.plan.Name, State: r.state.Load().(string), Duration: r.plan.Duration}
	if s := r.started.Load(); s != 0 {
		p.Elapsed = min(time.Since(time.Unix(0, s)), r.plan.Duration)
	}
	if rec := r.rec.Load(); rec != nil {
		p.Calls, p.Failed = rec.Totals()
	}
	return p
}

func (r *variantRun) run(ctx context.Context) {
	p := r.plan
	r.result = report.Variant{Name: p.Name, Description: p.Description, Servers: p.Servers, Groups: p.groups()}
	r.state.Store("starting")
	err := r.execute(ctx)
	switch {
	case ctx.Err() != nil:
		// Stopped by the user (or the caller's deadline), whatever the
		// component that noticed first said.
		r.result.State = "interrupted"
	case err != nil:
		r.result.State, r.result.Error = "failed", err.Error()
	default:
		r.result.State = "done"
	}
	r.state.Store(r.result.State)
}

func (r *variantRun) execute(ctx context.Context) error {
	rec := stats.NewRecorder(time.Now())
	r.rec.Store(rec)
	sp := r.file.Scenario.Spec
	tracked := r.plan.tracksPod
	cfg := lab.Config{
		Seed: r.seed, Logger: r.opts.Logger,
		Waiting: func() { r.state.Store("waiting for a free address range") },
		PodObserver: func(p *corev1.Pod) pod.Observer {
			if !tracked(p) {
				return nil
			}
			return podObserver{rec: rec, name: p.Name}
		},
		DNSQuery:  dnsObserver(rec),
		ProxyConn: proxyObserver(rec),
	}
	if sp.DNS.TTL != nil {
		cfg.DNSTTL = sp.DNS.TTL.Duration
		if cfg.DNSTTL == 0 {
			cfg.DNSTTL = -1 // explicit zero: no caching
		}
	}
	cfg.DNSFixedOrder = sp.DNS.FixedOrder
	cfg.DNSPods = clusterdns.PodMode(sp.DNS.Pods)
	cfg.ProxyMode = proxy.Mode(r.plan.Cluster.ProxyMode)
	cfg.DeadAddress = r.plan.Cluster.DeadAddress
	if b := r.plan.Cluster.RestartBackoff; b != nil {
		cfg.RestartBackoff = b.Duration
	}
	cfg.PodEvents = func(p *corev1.Pod, event string, at time.Time) { rec.PodEvent(p.Name, event, at) }
	setupCtx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	l, err := lab.Start(setupCtx, cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	r.result.DNS = l.DNSAddr()
	r.result.PodCIDR = l.Cluster.Config().PodCIDR.String()
	l.Cluster.Factory().Core().V1().Pods().Informer().AddEventHandler(newPodPhases(rec, tracked).handlers())
	if err := l.Apply(setupCtx, r.plan.Objects); err != nil {
		return r.file.applyError(err)
	}
	if err := l.WaitReady(setupCtx); err != nil {
		return fmt.Errorf("variant %s: pods not ready within %v: %w", r.plan.Name, setupTimeout, err)
	}
	r.fillClusterIPs(l)
	rec.Node(netip.MustParseAddr("127.0.0.1"))
	cl, err := newClients(setupCtx, l, rec, r.plan.Clients)
	if err != nil {
		return err
	}
	return r.drive(ctx, l, rec, cl)
}

// fillClusterIPs records the ClusterIP each group's Service got.
func (r *variantRun) fillClusterIPs(l *lab.Lab) {
	for i := range r.result.Groups {
		g := &r.result.Groups[i]
		for _, cp := range r.plan.Clients {
			if cp.Group != g.Name || cp.Target.Headless() {
				continue
			}
			svc, err := l.Cluster.Factory().Core().V1().Services().Lister().Services(cp.Target.Namespace).Get(cp.Target.Service.Name)
			if err == nil {
				g.ClusterIP = svc.Spec.ClusterIP
			}
			break
		}
	}
}

// drive runs load for the plan's duration, applying timeline steps, then
// stops the clients (in-flight calls finish) and summarises.
func (r *variantRun) drive(ctx context.Context, l *lab.Lab, rec *stats.Recorder, cl *clients) error {
	start := time.Now()
	rec.SetStart(start)
	r.started.Store(start.UnixNano())
	r.state.Store("running")
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for _, c := range cl.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Run(loadCtx)
		}()
	}
	cpu0 := processCPU()
	stepErrs := r.timeline(loadCtx, l, rec, cl, start)
	reached := min(time.Since(start), r.plan.Duration)
	cpu := processCPU() - cpu0
	stopLoad()
	wg.Wait()
	cl.closeProxies()
	r.result.StepErrors = stepErrs
	// Only windows that ended before an interruption are reported: a window
	// cut short would compare unlike with the others.
	var windows []stats.Window
	for _, w := range r.plan.Windows {
		if w.To <= reached {
			windows = append(windows, w)
		}
	}
	r.result.Summary = rec.Summarize(windows, reached)
	r.result.Why = explain(r.plan, r.result.Summary, time.Duration(r.file.minResolution()*float64(time.Second)))
	if ctx.Err() != nil {
		r.result.Interrupted = reached.Seconds()
	}
	if r.opts.Sequential { // set by Run for spec.sequential too
		// Alone in the process, the process's CPU is this variant's.
		calls, _ := rec.Totals()
		if calls > 0 {
			v := cpu.Seconds() * 1000 / float64(calls) * 1000
			r.result.CPUPer1000 = &v
		}
	}
	r.result.Checks = checkExpectations(r.file.Scenario.Spec.Expect, &r.result, r.result.StepPods)
	return nil
}

// timeline applies the steps at their offsets and returns when the run's
// duration is over (or ctx ends). It returns the steps that failed.
func (r *variantRun) timeline(ctx context.Context, l *lab.Lab, rec *stats.Recorder, cl *clients, start time.Time) []string {
	steps := append([]Step(nil), r.plan.Steps...)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].At.Duration < steps[j].At.Duration })
	var errs []string
	t := time.NewTimer(0)
	defer t.Stop()
	wait := func(at time.Duration) bool {
		t.Reset(time.Until(start.Add(at)))
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	<-t.C
	for _, st := range steps {
		if !wait(st.At.Duration) {
			return errs
		}
		pod, err := r.apply(ctx, l, rec, cl, st)
		if pod != "" && st.Name != "" {
			if r.result.StepPods == nil {
				r.result.StepPods = map[string]string{}
			}
			r.result.StepPods[st.Name] = pod
		}
		text := st.describe()
		if pod != "" && st.podRef().Pod == "" {
			text += " (" + pod + ")"
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", text, err))
			rec.Mark(text+" failed: "+err.Error(), time.Now())
			continue
		}
		rec.Mark(text, time.Now())
	}
	wait(r.plan.Duration)
	return errs
}

func namespaceOfObj(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

func (f *File) minResolution() float64 {
	if m := f.Scenario.Spec.GRPC.MinResolutionInterval; m != nil {
		return m.Duration.Seconds()
	}
	return DefaultMinResolutionInterval.Seconds()
}

// applyError maps an API error from applying the file's objects to the
// document and field it concerns.
func (f *File) applyError(err error) error {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Details == nil {
		return err
	}
	det := se.ErrStatus.Details
	for _, o := range f.Objects {
		m, merr := meta.Accessor(o.Obj)
		if merr != nil || m.GetName() != det.Name || !strings.EqualFold(o.Doc.Kind, det.Kind) && det.Kind != "" {
			continue
		}
		field := ""
		if len(det.Causes) > 0 {
			field = det.Causes[0].Field
		}
		return o.Doc.Errorf(field, "rejected by the API: %s", se.ErrStatus.Message)
	}
	return err
}
