package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// Config tunes a Proxier. The zero value works.
type Config struct {
	// Mode is the kube-proxy mode emulated for every Service: ModeIPTables
	// ("iptables", the default, also for ""), ModeNFTables ("nftables") or
	// ModeIPVS ("ipvs"); any other value makes Run fail. It decides the
	// endpoint of a new connection and how ClientIP affinity entries live
	// (package documentation):
	//   - iptables and nftables: uniform random over the eligible endpoints.
	//     ClientIP entries live timeoutSeconds after the client's last new
	//     connection; iptables remembers at most 100 clients per endpoint.
	//   - ipvs: round robin (rr) per VIP, in the kernel's real-server list
	//     order: endpoints new in one sync join at the front in descending
	//     "IP:port" string order; the rotation goes on from the last server
	//     used, or from its predecessor if that one was removed; and it
	//     restarts at the front after the VIP had no endpoints. ClientIP
	//     entries (persistence templates) also live while a connection they
	//     placed is open, then up to 60 s more.
	Mode Mode
	// Seed seeds the random pick of iptables and nftables modes. Each VIP
	// draws from its own stream derived from Seed and the VIP, so with the
	// same Seed and the same order of connections to a VIP the same
	// endpoints are picked. Zero (the default) seeds randomly.
	Seed uint64
	// DialTimeout bounds the connect to the chosen pod; when it expires the
	// client connection is reset. Zero means 1s.
	DialTimeout time.Duration
	// MinSyncPeriod is the least time between the end of one sync (rules
	// written) and the start of the next, as kube-proxy's
	// --iptables-min-sync-period / --ipvs-min-sync-period
	// (KubeProxyConfiguration minSyncPeriod): Service and EndpointSlice
	// changes that arrive meanwhile wait and are applied together in one sync
	// when it is up, so a removed endpoint keeps getting new connections
	// until then. The first sync, once the informers have synced, is at once.
	// Zero means the mode's default: DefaultMinSyncPeriod (1 s) in iptables
	// and nftables modes, and no wait in ipvs mode, whose
	// KubeProxyConfiguration ipvs.minSyncPeriod has no default
	// (pkg/proxy/apis/config/v1alpha1/defaults.go). Negative means no wait:
	// every change is applied at once.
	MinSyncPeriod time.Duration
	// OnConn, if not nil, is called on the connection's goroutine when a
	// tracked connection opens (the pod accepted) and when it closes (both
	// directions done). It must return quickly. Nil means no hook.
	OnConn func(Conn, ConnEvent)
	// Logger receives warnings (skipped Services, listen failures) and debug
	// records (failed dials). Nil discards.
	Logger *slog.Logger
}

// DefaultDialTimeout is the connect timeout used when Config.DialTimeout is 0.
const DefaultDialTimeout = time.Second

// DefaultMinSyncPeriod is the MinSyncPeriod used when Config.MinSyncPeriod
// is 0 in iptables and nftables modes: kube-proxy's default
// iptables.minSyncPeriod and nftables.minSyncPeriod
// (pkg/proxy/apis/config/v1alpha1/defaults.go, k8s.io/kubernetes v1.37.2).
const DefaultMinSyncPeriod = time.Second

// minSyncPeriod resolves Config.MinSyncPeriod d for mode; 0 means no wait.
func minSyncPeriod(mode Mode, d time.Duration) time.Duration {
	switch {
	case d < 0 || (d == 0 && mode == ModeIPVS):
		return 0
	case d == 0:
		return DefaultMinSyncPeriod
	}
	return d
}

// Proxier is the emulated kube-proxy. Create it with New, start the
// informer factory, then call Run.
type Proxier struct {
	mode        Mode
	seed        uint64
	dialTimeout time.Duration
	minSync     time.Duration // 0: no wait between syncs
	onConn      func(Conn, ConnEvent)
	log         *slog.Logger
	now         func() time.Time // the clock of affinity timeouts; tests replace it before Run
	synced      func()           // if not nil, called on the Run goroutine after each sync; tests set it before Run

	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	handlers []handlerRegistration
	setupErr error // returned by Run: bad Config, or a handler not registered

	queue   queue
	track   conntrack
	rules   rulesBoard
	wg      sync.WaitGroup // accept loops and relays
	started atomic.Bool

	// Owned by the Run goroutine.
	ports      map[types.NamespacedName]map[netip.AddrPort]*servicePort
	owner      map[netip.AddrPort]types.NamespacedName
	conflicted map[types.NamespacedName]bool
	warned     map[string]bool
}

type handlerRegistration struct {
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
}

// New returns a Proxier fed by factory's Services and discovery/v1
// EndpointSlices informers, which it registers; the caller starts factory
// (before or after Run). A bad cfg is reported by Run.
func New(factory informers.SharedInformerFactory, cfg Config) *Proxier {
	mode, err := ParseMode(string(cfg.Mode))
	p := &Proxier{
		mode:        mode,
		setupErr:    err,
		now:         time.Now,
		seed:        cfg.Seed,
		dialTimeout: cfg.DialTimeout,
		minSync:     minSyncPeriod(mode, cfg.MinSyncPeriod),
		onConn:      cfg.OnConn,
		log:         cfg.Logger,
		services:    factory.Core().V1().Services().Lister(),
		slices:      factory.Discovery().V1().EndpointSlices().Lister(),
		queue:       newQueue(),
		rules:       newRulesBoard(),
		ports:       map[types.NamespacedName]map[netip.AddrPort]*servicePort{},
		owner:       map[netip.AddrPort]types.NamespacedName{},
		conflicted:  map[types.NamespacedName]bool{},
		warned:      map[string]bool{},
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = DefaultDialTimeout
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("component", "proxy")
	p.handle(factory.Core().V1().Services().Informer())
	p.handle(factory.Discovery().V1().EndpointSlices().Informer())
	return p
}

// handle registers p's event handler on inf.
func (p *Proxier) handle(inf cache.SharedIndexInformer) {
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.onChange(nil, obj) },
		UpdateFunc: p.onChange,
		DeleteFunc: func(obj any) { p.onChange(obj, nil) },
	})
	if err != nil {
		p.setupErr = errors.Join(p.setupErr, fmt.Errorf("proxy: registering event handler: %w", err))
		return
	}
	p.handlers = append(p.handlers, handlerRegistration{inf, reg})
}

// onChange marks the Services behind old and cur (a Service, or an
// EndpointSlice through its kubernetes.io/service-name label) for the next
// sync. It never blocks the informer.
func (p *Proxier) onChange(old, cur any) {
	for _, obj := range []any{old, cur} {
		if key, ok := serviceKey(obj); ok {
			p.queue.add(key)
		}
	}
}

// Run syncs the dataplane with the informers' Services and EndpointSlices
// until ctx ends, then closes every listener and every relayed connection
// and waits for all its goroutines before returning nil. It may be called
// once. It fails at once if the Config was bad (an unknown Mode).
//
// Syncs are paced as kube-proxy's BoundedFrequencyRunner paces them
// (pkg/proxy/runner/bounded_frequency_runner.go, Loop): a sync runs as soon
// as a change is pending, then Run waits MinSyncPeriod before taking the
// next batch; changes in that cooldown are coalesced into one sync at its
// end. The runner's max-interval resync is not emulated: it rewrites the
// same rules.
func (p *Proxier) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("proxy: Run called more than once")
	}
	defer p.shutdown()
	if p.setupErr != nil {
		return p.setupErr
	}
	synced := make([]cache.InformerSynced, len(p.handlers))
	for i, h := range p.handlers {
		synced[i] = h.reg.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended first
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.queue.ready:
		}
		p.sync(ctx)
		if p.synced != nil {
			p.synced()
		}
		if !p.cooldown(ctx) {
			return nil
		}
	}
}

// cooldown waits p.minSync after a sync, as the BoundedFrequencyRunner's
// minIntervalTimer; it returns false if ctx ended first.
func (p *Proxier) cooldown(ctx context.Context) bool {
	if p.minSync <= 0 {
		return ctx.Err() == nil
	}
	return pause(ctx, p.minSync)
}

// shutdown tears the dataplane down: handlers, listeners, then relays, and
// waits for every goroutine p started.
func (p *Proxier) shutdown() {
	for _, h := range p.handlers {
		h.informer.RemoveEventHandler(h.reg)
	}
	for key, ports := range p.ports {
		for _, sp := range ports {
			sp.closeListener()
		}
		delete(p.ports, key)
	}
	p.track.closeAll()
	p.wg.Wait()
	p.rules.stop()
}

// Mode returns the kube-proxy mode p emulates (DefaultMode for an empty
// Config.Mode).
func (p *Proxier) Mode() Mode { return p.mode }

// Conntrack returns a snapshot of the currently open relayed connections,
// oldest first.
func (p *Proxier) Conntrack() []Conn { return p.track.snapshot() }

// queue is the set of Services whose rules need a sync, kube-proxy's
// "pending changes", with a one-slot signal for the Run loop.
type queue struct {
	mu    sync.Mutex
	dirty map[types.NamespacedName]struct{}
	ready chan struct{}
}

func newQueue() queue {
	return queue{dirty: map[types.NamespacedName]struct{}{}, ready: make(chan struct{}, 1)}
}

func (q *queue) add(key types.NamespacedName) {
	q.mu.Lock()
	q.dirty[key] = struct{}{}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue) take() map[types.NamespacedName]struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dirty
	q.dirty = map[types.NamespacedName]struct{}{}
	return d
}
