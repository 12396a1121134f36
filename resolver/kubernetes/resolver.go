package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/resolver"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// recheckInterval bounds how often ResolveNow looks the Service up again
// while it has no EndpointSlice. A variable for tests.
var recheckInterval = time.Second

// serviceTimeout bounds the lookup of a Service that has no EndpointSlice.
const serviceTimeout = 5 * time.Second

// kubeResolver watches one Service's EndpointSlices for one channel. Two
// goroutines belong to it: the informer's and the loop, which alone calls
// cc; Close cancels both and waits for them.
type kubeResolver struct {
	t        target
	cc       resolver.ClientConn
	api      Client
	log      *slog.Logger
	fallback bool
	stats    *targetStats
	seed     maphash.Seed // this channel's address order
	selector string       // kubernetes.io/service-name=<service>

	informer cache.SharedIndexInformer
	synced   <-chan struct{} // closed once the handler has the initial list

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	dirty     chan struct{} // slices or the API's health changed; one pending at most
	now       chan struct{} // ResolveNow; one pending at most

	mu     sync.Mutex
	apiErr error // the last list or watch failure; nil once a call succeeds

	// The loop's own state.
	published []entry   // what the channel has, sorted by address
	hasState  bool      // UpdateState was called
	updatedAt time.Time // of the last UpdateState
	shown     string    // the error reported since the last UpdateState; "" none
	fellBack  bool      // published serving-terminating endpoints
	svcWhy    *failure  // why a Service has no slice, once looked up
	checkedAt time.Time // of that lookup
}

// failure is an error for the channel and its metrics reason.
type failure struct {
	reason, msg string
}

func newResolver(t target, cc resolver.ClientConn, api Client, o options, stats *targetStats) *kubeResolver {
	ctx, cancel := context.WithCancel(context.Background())
	r := &kubeResolver{
		t: t, cc: cc, api: api, fallback: o.fallback, stats: stats, seed: maphash.MakeSeed(),
		log:      o.logger.With("component", "kubernetes-resolver", "target", t.String()),
		selector: labels.Set{discoveryv1.LabelServiceName: t.service}.String(),
		ctx:      ctx, cancel: cancel,
		dirty: make(chan struct{}, 1), now: make(chan struct{}, 1),
	}
	r.informer = cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(r.listWatch(), api),
		&discoveryv1.EndpointSlice{}, cache.SharedIndexInformerOptions{ResyncPeriod: o.resync})
	// The errors that end the reflector's list-and-watch were seen in
	// listWatch, but for rare ones of its own (the store's); this handler
	// also keeps client-go from logging each through klog.
	_ = r.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		if ctx.Err() == nil && !routine(err) && r.apiError() == nil {
			r.apiFailed("list and watch", err)
		}
	})
	reg, _ := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.changed(obj) },
		UpdateFunc: func(old, obj any) { r.changed(old, obj) },
		DeleteFunc: func(obj any) { r.changed(obj) },
	})
	r.synced = reg.HasSyncedChecker().Done()
	return r
}

// listWatch lists and watches the Service's slices, noting each call's
// outcome: a failed call (but a watch-list request's) or an error on an
// open watch is reported, and an opened watch ends the failure (a list
// alone does not: the data would go stale again at once if the watch then
// fails).
func (r *kubeResolver) listWatch() *cache.ListWatch {
	eps := r.api.DiscoveryV1().EndpointSlices(r.t.namespace)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = r.selector
			l, err := eps.List(ctx, opts)
			if err != nil {
				r.apiFailed("list", err)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = r.selector
			w, err := eps.Watch(ctx, opts)
			if err != nil {
				// A watch-list request the API server refused is followed
				// by a list, whose outcome is the one to report; one that
				// never reached a server (connection refused, a timeout)
				// is retried as it was, with no list, so it is reported.
				if !watchList(opts) || !answered(err) {
					r.apiFailed("watch", err)
				}
				return nil, err
			}
			r.apiOK()
			return r.observe(w), nil
		},
	}
}

// watchList reports a watch-list request (client-go's WatchListClient,
// on by default since v0.35): when it fails, as on an API server without
// the WatchList feature, the reflector falls back to a list and a watch at
// once, and the list's failure, if any, is the one to report.
func watchList(opts metav1.ListOptions) bool {
	return opts.SendInitialEvents != nil && *opts.SendInitialEvents
}

// answered reports whether err is an API server's answer (a Status), not a
// failure to reach one.
func answered(err error) bool {
	var s apierrors.APIStatus
	return errors.As(err, &s)
}

// routine reports watch ends the reflector recovers from at once, with a
// new watch or list: a closed stream, an expired resource version.
func routine(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// observe relays w's events to the reflector, reporting ERROR events
// (client-go's reflector only logs them before it re-lists). The relay
// goroutine ends when the reflector stops the watch, which it always does,
// or when w ends; Close waits for it.
func (r *kubeResolver) observe(w watch.Interface) watch.Interface {
	ow := &observedWatch{in: w, out: make(chan watch.Event), stop: make(chan struct{})}
	r.wg.Add(1) // the informer's goroutine, calling us, holds the group open
	go func() {
		defer r.wg.Done()
		ow.relay(func(err error) {
			if !routine(err) {
				r.apiFailed("watch", err)
			}
		})
	}()
	return ow
}

type observedWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *observedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *observedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

func (w *observedWatch) relay(onError func(error)) {
	defer close(w.out)
	for {
		select {
		case <-w.stop:
			return
		case e, ok := <-w.in.ResultChan():
			if !ok {
				return
			}
			if e.Type == watch.Error {
				onError(apierrors.FromObject(e.Object))
			}
			select {
			case w.out <- e:
			case <-w.stop:
				return
			}
		}
	}
}

// apiFailed records a failed list or watch.
func (r *kubeResolver) apiFailed(op string, err error) {
	if r.ctx.Err() != nil {
		return // closing: the calls fail because we cancelled them
	}
	r.mu.Lock()
	r.apiErr = fmt.Errorf("%s EndpointSlices: %w", op, err)
	r.mu.Unlock()
	r.markDirty()
}

// apiOK ends a failure: a watch is open again.
func (r *kubeResolver) apiOK() {
	r.mu.Lock()
	was := r.apiErr
	r.apiErr = nil
	r.mu.Unlock()
	if was != nil {
		r.markDirty()
	}
}

func (r *kubeResolver) apiError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.apiErr
}

// changed marks the state dirty if one of objs is a slice of the Service
// (a fake clientset's watch ignores label selectors, so check).
func (r *kubeResolver) changed(objs ...any) {
	for _, o := range objs {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if s, ok := o.(*discoveryv1.EndpointSlice); ok && r.ours(s) {
			r.markDirty()
			return
		}
	}
}

func (r *kubeResolver) ours(s *discoveryv1.EndpointSlice) bool {
	return s.Namespace == r.t.namespace && s.Labels[discoveryv1.LabelServiceName] == r.t.service
}

func (r *kubeResolver) markDirty() {
	select {
	case r.dirty <- struct{}{}:
	default:
	}
}

func (r *kubeResolver) start() {
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.informer.RunWithContext(r.ctx)
	}()
	go r.loop()
}

// ResolveNow asks for a fresh look: the watch keeps the addresses current,
// so this re-publishes only what changed, and while the Service has no
// EndpointSlice it looks the Service up again (at most once per second).
// It never blocks.
func (r *kubeResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Close stops the informer and the loop and waits for both; cc is not
// called after it returns.
func (r *kubeResolver) Close() {
	r.closeOnce.Do(func() {
		r.cancel()
		r.wg.Wait()
		r.stats.release()
	})
}

// loop publishes the slices' addresses, or an error, whenever they or the
// API's health change.
func (r *kubeResolver) loop() {
	defer r.wg.Done()
	synced, listed := r.synced, false
	for {
		recheck := false
		select {
		case <-r.ctx.Done():
			return
		case <-synced:
			synced, listed = nil, true
		case <-r.dirty:
		case <-r.now:
			recheck = true
		}
		r.sync(listed, recheck)
	}
}

// sync brings the channel up to date. An API failure is reported and the
// addresses the channel has are kept (they may well still work; the
// message says how old they are). Before the initial list nothing is
// published.
func (r *kubeResolver) sync(listed, recheck bool) {
	if err := r.apiError(); err != nil {
		r.report(r.apiFailure(err))
		return
	}
	if !listed {
		return
	}
	es, tl := merge(r.slices(), r.t, r.fallback)
	if len(es) == 0 {
		r.publish(nil)
		r.report(r.emptyFailure(tl, recheck))
		return
	}
	r.svcWhy = nil
	r.publish(es)
	if tl.fallback != r.fellBack {
		r.fellBack = tl.fallback
		r.log.Info("kubernetes resolver: terminating fallback", "on", tl.fallback, "endpoints", len(es))
	}
}

// slices returns the cached slices of the Service.
func (r *kubeResolver) slices() []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, o := range r.informer.GetStore().List() {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok && r.ours(s) {
			out = append(out, s)
		}
	}
	return out
}

// publish gives the channel es unless it has them already: the same
// addresses and no error reported since, or no address either way (the
// error that explains it stands).
func (r *kubeResolver) publish(es []entry) {
	if r.hasState && slices.EqualFunc(es, r.published, entryEqual) && (r.shown == "" || len(es) == 0) {
		return
	}
	if r.shown != "" && len(es) > 0 {
		r.log.Info("kubernetes resolver: recovered", "addresses", len(es))
	}
	// A watch-based resolver has nothing to retry when the channel rejects
	// a state (resolver.ClientConn's doc): the next change comes anyway.
	_ = r.cc.UpdateState(r.state(es))
	r.published, r.hasState, r.updatedAt, r.shown = es, true, time.Now(), ""
	r.stats.updated(len(es))
	r.log.Debug("kubernetes resolver: update", "addresses", len(es))
}

func entryEqual(a, b entry) bool { return a.addr == b.addr && a.info.Equal(*b.info) }

// state builds the channel's state: one endpoint per address, in an order
// of this channel's own (a hash of the address with a per-resolver seed),
// which stays put across updates. pick_first channels thus spread over the
// endpoints, as DNS answers in random order spread them, and keep their
// pick when others come and go.
func (r *kubeResolver) state(es []entry) resolver.State {
	type keyed struct {
		h uint64
		e *entry
	}
	order := make([]keyed, len(es))
	for i := range es {
		order[i] = keyed{maphash.String(r.seed, es[i].addr), &es[i]}
	}
	slices.SortFunc(order, func(a, b keyed) int { return cmp.Compare(a.h, b.h) })
	st := resolver.State{Addresses: make([]resolver.Address, len(es)), Endpoints: make([]resolver.Endpoint, len(es))}
	for i, k := range order {
		attrs := k.e.info.attributes()
		st.Addresses[i] = resolver.Address{Addr: k.e.addr, Attributes: attrs}
		st.Endpoints[i] = resolver.Endpoint{Addresses: st.Addresses[i : i+1 : i+1], Attributes: attrs}
	}
	return st
}

// report gives the channel f unless it was the last thing reported.
func (r *kubeResolver) report(f failure) {
	msg := "kubernetes resolver: " + f.msg
	if msg == r.shown {
		return
	}
	if r.shown == "" {
		r.log.Warn(msg, "reason", f.reason)
	}
	r.cc.ReportError(errors.New(msg))
	r.shown = msg
	r.stats.failed(f.reason)
}

// apiFailure says what failed and what the channel keeps meanwhile.
func (r *kubeResolver) apiFailure(err error) failure {
	f := failure{reason: reasonAPI, msg: fmt.Sprintf("%s: %v", r.t, err)}
	switch {
	case apierrors.IsForbidden(err):
		f.reason = reasonForbidden
		f.msg += fmt.Sprintf(" (the resolver needs get, list and watch on endpointslices.discovery.k8s.io in namespace %s)", r.t.namespace)
	case apierrors.IsUnauthorized(err):
		f.reason = reasonForbidden
		f.msg += " (the API server did not accept the credentials: an expired or wrong token or certificate in the kubeconfig or the service account)"
	}
	switch {
	case !r.hasState:
		f.msg += "; no addresses yet"
	case len(r.published) == 0:
		f.msg += "; no addresses"
	default:
		f.msg += fmt.Sprintf("; keeping the %d addresses of %s (%.1fs ago), which may be stale",
			len(r.published), r.updatedAt.Format(time.TimeOnly), time.Since(r.updatedAt).Seconds())
	}
	return f
}

// emptyFailure says why the Service has nothing to publish.
func (r *kubeResolver) emptyFailure(tl tally, recheck bool) failure {
	svc := "Service " + r.t.key()
	switch {
	case tl.slices == 0:
		return r.noSlices(recheck)
	case tl.endpoints > 0 && tl.noPort == tl.endpoints:
		return failure{reasonNoPort, fmt.Sprintf("no EndpointSlice of %s has a port named %q (ports: %v)", svc, r.t.port, tl.ports)}
	case tl.endpoints == 0:
		return failure{reasonNoEndpoints, fmt.Sprintf("%s has no endpoints (%d EndpointSlices, all empty)", svc, tl.slices)}
	}
	msg := fmt.Sprintf("%s has no ready endpoint: of %d endpoints in %d EndpointSlices, %d are terminating, %d not ready",
		svc, tl.endpoints, tl.slices, tl.terminating, tl.notReady)
	if tl.noPort > 0 {
		msg += fmt.Sprintf(", %d without port %q", tl.noPort, r.t.port)
	}
	return failure{reasonNoEndpoints, msg}
}

// noSlices looks the Service up to say why it has no EndpointSlice, once
// when that starts and again on ResolveNow at most once per
// recheckInterval.
func (r *kubeResolver) noSlices(recheck bool) failure {
	if r.svcWhy != nil && !(recheck && time.Since(r.checkedAt) >= recheckInterval) {
		return *r.svcWhy
	}
	ctx, cancel := context.WithTimeout(r.ctx, serviceTimeout)
	defer cancel()
	svc, err := r.api.CoreV1().Services(r.t.namespace).Get(ctx, r.t.service, metav1.GetOptions{})
	r.checkedAt = time.Now()
	none := fmt.Sprintf("no EndpointSlices labelled %s in namespace %s", r.selector, r.t.namespace)
	var f failure
	switch {
	case apierrors.IsNotFound(err):
		f = failure{reasonServiceNotFound, fmt.Sprintf("Service %s not found", r.t.key())}
	case err != nil:
		f = failure{reasonNoSlices, fmt.Sprintf("%s (whether Service %s exists is unknown: %v)", none, r.t.key(), err)}
	case svc.Spec.Type == "ExternalName":
		f = failure{reasonNoSlices, fmt.Sprintf("Service %s is of type ExternalName (%s): it has no endpoints", r.t.key(), svc.Spec.ExternalName)}
	case len(svc.Spec.Selector) == 0:
		f = failure{reasonNoSlices, fmt.Sprintf("Service %s has no selector and there are %s", r.t.key(), none)}
	default:
		f = failure{reasonNoSlices, fmt.Sprintf("Service %s has no EndpointSlices yet", r.t.key())}
	}
	r.svcWhy = &f
	return f
}
