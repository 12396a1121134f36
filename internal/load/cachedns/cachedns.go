package cachedns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/resolver"
)

// Forever as a CacheTTL keeps the first successful answer for the life of
// the cache, like networkaddress.cache.ttl=-1 (the JVM's default when a
// security manager is installed).
const Forever time.Duration = -1

// Scheme is the target scheme the Builder serves. It is grpc-go's own DNS
// scheme, so a Builder passed to one channel with grpc.WithResolvers
// replaces grpc-go's DNS resolver for that channel only.
const Scheme = "dns"

// Config configures a Builder. The zero value resolves like grpc-go's own
// DNS resolver with no cache.
type Config struct {
	// Source is the loopback IP DNS queries are sent from (a client pod's
	// IP); the zero Addr lets the kernel choose.
	Source netip.Addr
	// Dial, if not nil, opens the queries' sockets in place of package
	// loopback's Dialer from Source, e.g. inside a client pod's own
	// network namespace (package load's Config.Dial); they must then
	// come from Source. It is called from the resolvers' goroutines,
	// concurrently.
	Dial DialFunc
	// MinResolutionInterval is the least time between two resolutions of
	// one resolver; default 30 s (grpc-go's MinResolutionInterval).
	MinResolutionInterval time.Duration
	// CacheTTL is how long a successful answer is reused: 0 (the default)
	// caches nothing, Forever never expires, and any other negative value
	// is an error. Empty answers and errors are never cached (the JVM's
	// networkaddress.cache.negative.ttl is not modelled).
	CacheTTL time.Duration
	// Timeout bounds each lookup (the UDP query and any TCP retry
	// together); default 5 s.
	Timeout time.Duration
}

// Builder builds resolvers for one channel and holds that channel's address
// cache. It is safe for concurrent use.
type Builder struct {
	cfg Config

	mu    sync.Mutex
	cache map[string]entry // by host name
}

type entry struct {
	addrs []netip.Addr
	at    time.Time
}

// NewBuilder validates cfg and returns a Builder with an empty cache.
func NewBuilder(cfg Config) (*Builder, error) {
	if cfg.CacheTTL < 0 && cfg.CacheTTL != Forever {
		return nil, fmt.Errorf("cachedns: cache TTL %v, want >= 0 or Forever (-1)", cfg.CacheTTL)
	}
	if cfg.MinResolutionInterval < 0 || cfg.Timeout < 0 {
		return nil, errors.New("cachedns: negative interval or timeout")
	}
	if cfg.MinResolutionInterval == 0 {
		cfg.MinResolutionInterval = 30 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Builder{cfg: cfg, cache: map[string]entry{}}, nil
}

// Scheme returns "dns".
func (b *Builder) Scheme() string { return Scheme }

// Build starts a resolver for target, which must be
// dns://<loopback IP>[:port]/<host>[:port]. An IP-literal host is handed to
// cc at once and never resolved. Otherwise a goroutine owned by the
// returned resolver resolves at once and on ResolveNow; Close stops it and
// waits for it.
func (b *Builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	t, err := parse(target.URL.Host, target.Endpoint())
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(t.Host); err == nil {
		cc.UpdateState(State([]netip.Addr{ip}, t.Port))
		return nopResolver{}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &dnsResolver{b: b, t: t, cc: cc, ctx: ctx, cancel: cancel, rn: make(chan struct{}, 1)}
	r.wg.Add(1)
	go r.watch()
	return r, nil
}

// dial is how the builder's queries are sent: Config.Dial, else from
// Config.Source.
func (b *Builder) dial() DialFunc {
	if b.cfg.Dial != nil {
		return b.cfg.Dial
	}
	return loopback.Dialer{Source: b.cfg.Source}.Dial
}

// lookup answers from the cache when a fresh entry exists, else asks DNS.
func (b *Builder) lookup(ctx context.Context, t Target) ([]netip.Addr, error) {
	now := time.Now()
	if ttl := b.cfg.CacheTTL; ttl != 0 {
		b.mu.Lock()
		e, ok := b.cache[t.Host]
		b.mu.Unlock()
		if ok && (ttl == Forever || now.Sub(e.at) < ttl) {
			return e.addrs, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	addrs, err := Lookup(ctx, t.Server, b.dial(), t.Host)
	if err == nil && len(addrs) > 0 && b.cfg.CacheTTL != 0 {
		b.mu.Lock()
		b.cache[t.Host] = entry{addrs: addrs, at: now}
		b.mu.Unlock()
	}
	return addrs, err
}

// dnsResolver watches one target, as grpc-go's dnsResolver.
type dnsResolver struct {
	b      *Builder
	t      Target
	cc     resolver.ClientConn
	ctx    context.Context
	cancel context.CancelFunc
	rn     chan struct{} // ResolveNow requests; one pending at most
	wg     sync.WaitGroup
}

// ResolveNow asks for a resolution; it never blocks, and requests made
// while one is pending fold into it.
func (r *dnsResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.rn <- struct{}{}:
	default:
	}
}

// Close stops the resolver and waits for its goroutine, cancelling any
// lookup in progress.
func (r *dnsResolver) Close() {
	r.cancel()
	r.wg.Wait()
}

// watch is grpc-go's dnsResolver.watcher schedule: resolve; on success wait
// for ResolveNow and for MinResolutionInterval since this resolution; on
// failure wait the backoff and retry.
func (r *dnsResolver) watch() {
	defer r.wg.Done()
	retries := 1
	for {
		err := r.resolve()
		var next time.Time
		if err == nil {
			retries = 1
			next = time.Now().Add(r.b.cfg.MinResolutionInterval)
			select {
			case <-r.ctx.Done():
				return
			case <-r.rn:
			}
		} else {
			next = time.Now().Add(backoffFor(retries))
			retries++
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-r.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// resolve looks the target up and hands the result to the channel; an
// error means the lookup failed or the channel rejected the addresses.
func (r *dnsResolver) resolve() error {
	addrs, err := r.b.lookup(r.ctx, r.t)
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	if err != nil {
		r.cc.ReportError(err)
		return err
	}
	return r.cc.UpdateState(State(addrs, r.t.Port))
}

// State is the resolver state for ips on port: one endpoint per address,
// in order, as grpc-go's DNS resolver builds it. No ips give an empty
// (non-nil) list, which grpc-go's channel rejects.
func State(addrs []netip.Addr, port uint16) resolver.State {
	s := resolver.State{Addresses: []resolver.Address{}, Endpoints: []resolver.Endpoint{}}
	for _, ip := range addrs {
		a := resolver.Address{Addr: netip.AddrPortFrom(ip, port).String()}
		s.Addresses = append(s.Addresses, a)
		s.Endpoints = append(s.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{a}})
	}
	return s
}

// backoffFor is grpc-go's exponential backoff with backoff.DefaultConfig
// after retries failures.
func backoffFor(retries int) time.Duration {
	c := backoff.DefaultConfig
	d, limit := float64(c.BaseDelay), float64(c.MaxDelay)
	for ; d < limit && retries > 0; retries-- {
		d *= c.Multiplier
	}
	d = min(d, limit)
	d *= 1 + c.Jitter*(rand.Float64()*2-1)
	return time.Duration(max(d, 0))
}

type nopResolver struct{}

func (nopResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (nopResolver) Close()                                {}
