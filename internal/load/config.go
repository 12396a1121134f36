package load

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/lbpolicy"
	"github.com/pinlab/pinlab/internal/load/cachedns"
	"github.com/pinlab/pinlab/internal/loopback"
	kuberesolver "github.com/pinlab/pinlab/resolver/kubernetes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
)

// Resolver modes, the values of Config.Resolver.
const (
	// ResolverGRPC is grpc-go's own DNS resolver (a Go service): resolve
	// at start, then only on ResolveNow, at most once per the process-wide
	// resolver/dns MinResolutionInterval.
	ResolverGRPC = "grpc"
	// ResolverCached is grpc-go's schedule with a per-channel DNS cache
	// underneath, as a JVM service whose InetAddress cache keeps answers
	// for networkaddress.cache.ttl (see package cachedns).
	ResolverCached = "cached"
	// ResolverOnce resolves once when the channel starts (Run, Restart,
	// Reconfigure; not New) and gives grpc-go that static address list for
	// good, as a client configured with a list of IPs rendered at
	// start-up. A failed lookup leaves the list empty.
	ResolverOnce = "once"
	// ResolverKubernetes watches the target Service's EndpointSlices
	// through the Kubernetes API (Config.Kubernetes) with the resolver of
	// github.com/pinlab/pinlab/resolver/kubernetes: every change reaches
	// the channel within milliseconds, and neither DNS nor the Service's
	// ClusterIP is used. Target is then a kubernetes:// target.
	ResolverKubernetes = "kubernetes"
	// ResolverXDS is grpc-go's xDS resolver (Config.XDS), fed by an xDS
	// control plane (package xds): the target is xds:///NAME.NS:PORT, and
	// the control plane's Cluster, not Config.Policy, chooses the
	// load-balancing policy. Endpoint changes reach the channel as the
	// control plane pushes them.
	ResolverXDS = "xds"
)

// Resolvers lists the resolver modes.
var Resolvers = []string{ResolverGRPC, ResolverCached, ResolverOnce, ResolverKubernetes, ResolverXDS}

// Forever as a CacheTTL never expires cached addresses, like the JVM's
// networkaddress.cache.ttl=-1 (its default with a security manager).
const Forever = cachedns.Forever

// Config configures a client. The zero value of every field but Source,
// Target and Rate is a working default.
type Config struct {
	// Name identifies the client (e.g. "order-0").
	Name string
	// Source is the IP the client dials from, like a client pod's IP;
	// required, inside 127.0.0.0/8. The "cached" and "once" resolvers send
	// their DNS queries from it too.
	Source netip.Addr
	// Dial, if not nil, opens the client's sockets: its channel's TCP
	// connections (network "tcp") and the DNS queries of its resolver
	// ("udp", then "tcp" for an answer too long for UDP) to addr, an
	// "IP:port" the client has checked is inside the lab's addresses
	// (package loopback). It must open them from Source: the lab's node
	// gives a client in a pod with its own network namespace one that
	// dials inside that namespace, from the pod IP, as a process in the
	// pod would. Nil: package loopback's Dialer from Source, in this
	// process's namespace. With Dial, the "grpc" resolver (grpc-go's,
	// which dials its DNS server itself) sends its queries to a relay on
	// 127.0.0.1 that carries each one on through Dial; the "kubernetes"
	// one watches through Kubernetes, not Dial. Not with InCluster. It is
	// called from grpc-go's and the resolvers' goroutines, concurrently.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Target is the gRPC target, e.g.
	// "dns://127.96.0.10:53/pricing.shop.svc.cluster.local:8471". The
	// "cached" and "once" resolvers need this dns://<loopback IP:port>/
	// form; the "kubernetes" resolver a kubernetes:// one, e.g.
	// "kubernetes://shop/pricing:grpc".
	Target string
	// Policy is one of lbpolicy.Names: "pick_first" (grpc-go's default,
	// used when empty), "round_robin", "least_request",
	// "weighted_round_robin" or "ring_hash", set through the default
	// service config with PolicySettings; unused with the "xds" resolver,
	// whose control plane sets it.
	Policy string
	// PolicySettings are the policy's settings as JSON, with grpc-go's
	// names (lbpolicy.Parse); empty: grpc-go's defaults.
	PolicySettings string
	// Rate is the offered load in calls per second; must be > 0.
	Rate float64
	// Timeout is each call's deadline; default 1s.
	Timeout time.Duration
	// MaxInFlight bounds outstanding calls; a call due while that many are
	// open is not sent and counts as RESOURCE_EXHAUSTED. Default 1000.
	MaxInFlight int
	// Scheduler, if not nil, paces the client's calls (shared by the
	// clients of a run: more precise than a timer per client, see
	// Scheduler); its Run must be running. Nil paces with a timer.
	Scheduler *Scheduler
	// Phase delays the client's first call (and so its whole schedule) from
	// the start of Run, so that clients started together are not in step:
	// give each a different one within 1/Rate. Default 0.
	Phase time.Duration
	// Observer receives results; nil discards them.
	Observer Observer

	// Resolver is ResolverGRPC (the default), ResolverCached,
	// ResolverOnce or ResolverKubernetes.
	Resolver string
	// Kubernetes is the API the "kubernetes" resolver watches (the lab's
	// clientset is one); required with it, unused otherwise. Each channel
	// (New, Restart, Reconfigure) gets its own watch.
	Kubernetes kuberesolver.Client
	// XDS is the "xds" resolver: grpc-go's, built for the variant's
	// control plane (its bootstrap); required with it, unused otherwise.
	// A Builder of grpc-go's NewXDSResolverWithConfigForTesting makes an
	// xDS client, and so an ADS stream, for each channel it builds (New,
	// Restart, Reconfigure).
	XDS resolver.Builder
	// MinResolutionInterval is the "cached" resolver's least time between
	// two resolutions of one channel; default 30 s, grpc-go's default.
	// (The "grpc" resolver uses grpc-go's process-wide setting; "once"
	// never re-resolves.)
	MinResolutionInterval time.Duration
	// CacheTTL is how long the "cached" resolver reuses an answer: 0 (the
	// default) never, Forever for good, else a positive duration, as the
	// JVM's networkaddress.cache.ttl.
	CacheTTL time.Duration
	// ConnectTimeout is grpc-go's MinConnectTimeout: a connection attempt
	// (TCP connect and HTTP/2 handshake) gets max(ConnectTimeout, the
	// current connection backoff), so never less than the 1 s first
	// backoff; default 20 s, grpc-go's default. Connection backoff stays
	// grpc-go's default (1 s base, factor 1.6, jitter 0.2, 120 s cap).
	ConnectTimeout time.Duration

	// HealthCheck turns on client-side health checking (gRFC A17): the
	// channel watches grpc.health.v1 for "pricing.v1.Pricing" on every
	// connection and avoids backends that are not SERVING. In grpc-go
	// v1.85 only round_robin honours it: a top-level pick_first never
	// enables its health listener (pickfirst.EnableHealthListener is set
	// only by parents such as round_robin), so with pick_first it has no
	// effect, as in grpc-java.
	HealthCheck bool
	// WaitForReady makes each call wait (until its deadline) for a ready
	// connection instead of failing at once when none is, grpc-go's
	// grpc.WaitForReady(true).
	WaitForReady bool
	// Stream makes each call a WatchPrices server stream of StreamLength
	// (one reply every 100 ms) instead of a unary GetPrice; Rate is then
	// streams started per second and Timeout counts from the stream's
	// planned end. A stream succeeds when every reply arrived; it fails
	// with the status that cut it short.
	Stream bool
	// StreamLength is how long each stream runs; default 10 s.
	StreamLength time.Duration
	// Retry, if not nil, is the retry policy for pricing.v1.Pricing in the
	// service config (gRFC A6); nil means no retries (grpc-go still
	// retries transparently calls that never left the client).
	Retry *RetryPolicy

	// InCluster makes a client of a real cluster's pod (the pinlab image's
	// load command) rather than of the lab: Source must be unset (the
	// pod's own address), the target is any grpc-go target, resolved as a
	// grpc-go client in a pod resolves it ("dns:///pricing.shop:8471"
	// through the pod's resolv.conf, or kubernetes:// through Kubernetes),
	// and connections go wherever it leads, without package loopback's
	// check: that check keeps the lab's traffic on this machine, and a
	// pod's traffic is its cluster's. Only the "grpc" and "kubernetes"
	// resolvers are taken (the "cached" and "once" ones query the lab's
	// DNS from a lab address). Nothing in the lab sets it.
	InCluster bool
}

// RetryPolicy is a gRFC A6 retryPolicy. Zero fields take the defaults
// shown, which are A6's example policy.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt: >= 2; default 4. grpc-go caps
	// it at 5.
	MaxAttempts int
	// InitialBackoff and MaxBackoff bound the randomised delay before a
	// retry; defaults 100 ms and 1 s.
	InitialBackoff, MaxBackoff time.Duration
	// BackoffMultiplier grows the backoff after each attempt; default 2.
	BackoffMultiplier float64
	// RetryableStatusCodes are the codes that trigger a retry; default
	// UNAVAILABLE.
	RetryableStatusCodes []codes.Code
}

// checkBalancing checks cfg's policy, its settings and its resolver
// (both already defaulted).
func checkBalancing(cfg Config) error {
	p, err := lbpolicy.Parse(cfg.Policy, cfg.PolicySettings)
	if err == nil && cfg.Resolver != ResolverXDS {
		err = p.CheckOutsideXDS()
	}
	switch {
	case err != nil:
		return err
	case !slices.Contains(Resolvers, cfg.Resolver):
		return fmt.Errorf("resolver %q, want one of %v", cfg.Resolver, Resolvers)
	case cfg.Resolver == ResolverKubernetes && cfg.Kubernetes == nil:
		return fmt.Errorf("resolver %q needs the Kubernetes API", cfg.Resolver)
	case cfg.Resolver == ResolverXDS && cfg.XDS == nil:
		return fmt.Errorf("resolver %q needs grpc-go's xDS resolver, built for a control plane", cfg.Resolver)
	}
	return nil
}

// withDefaults validates cfg and fills in defaults.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("load: client %s: "+format, append([]any{cfg.Name}, args...)...)
	}
	cfg.Policy, cfg.Resolver = cmp.Or(cfg.Policy, "pick_first"), cmp.Or(cfg.Resolver, ResolverGRPC)
	if err := checkBalancing(cfg); err != nil {
		return bad("%w", err)
	}
	if !(cfg.Rate > 0) {
		return bad("rate %v calls/s, want > 0", cfg.Rate)
	}
	if err := checkAddresses(cfg); err != nil {
		return bad("%w", err)
	}
	if cfg.Timeout < 0 || cfg.ConnectTimeout < 0 || cfg.MinResolutionInterval < 0 {
		return bad("negative timeout or interval")
	}
	if cfg.CacheTTL < 0 && cfg.CacheTTL != Forever {
		return bad("cache TTL %v, want >= 0 or Forever (-1)", cfg.CacheTTL)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.StreamLength < 0 {
		return bad("negative stream length")
	}
	if cfg.StreamLength == 0 {
		cfg.StreamLength = 10 * time.Second
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 20 * time.Second
	}
	if cfg.MinResolutionInterval == 0 {
		cfg.MinResolutionInterval = 30 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1000
	}
	if cfg.Observer == nil {
		cfg.Observer = discard{}
	}
	if cfg.Retry != nil {
		rp, err := cfg.Retry.withDefaults()
		if err != nil {
			return bad("%w", err)
		}
		cfg.Retry = &rp
	}
	return cfg, nil
}

func (rp RetryPolicy) withDefaults() (RetryPolicy, error) {
	if rp.MaxAttempts == 0 {
		rp.MaxAttempts = 4
	}
	if rp.InitialBackoff == 0 {
		rp.InitialBackoff = 100 * time.Millisecond
	}
	if rp.MaxBackoff == 0 {
		rp.MaxBackoff = time.Second
	}
	if rp.BackoffMultiplier == 0 {
		rp.BackoffMultiplier = 2
	}
	if len(rp.RetryableStatusCodes) == 0 {
		rp.RetryableStatusCodes = []codes.Code{codes.Unavailable}
	}
	switch {
	case rp.MaxAttempts < 2:
		return rp, fmt.Errorf("retry: max attempts %d, want >= 2", rp.MaxAttempts)
	case rp.InitialBackoff < 0 || rp.MaxBackoff < 0:
		return rp, fmt.Errorf("retry: negative backoff")
	case !(rp.BackoffMultiplier > 0):
		return rp, fmt.Errorf("retry: backoff multiplier %v, want > 0", rp.BackoffMultiplier)
	}
	for _, c := range rp.RetryableStatusCodes {
		if c == codes.OK || c > codes.Unauthenticated {
			return rp, fmt.Errorf("retry: status code %d cannot be retried", c)
		}
	}
	rp.RetryableStatusCodes = slices.Clone(rp.RetryableStatusCodes)
	return rp, nil
}

// checkAddresses checks Source and Target: inside the lab's addresses,
// or, InCluster, only that there is no Source and a target.
func checkAddresses(cfg Config) error {
	if !cfg.InCluster {
		if err := loopback.CheckIP(cfg.Source); err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if err := CheckTarget(cfg.Target, cfg.Resolver); err != nil {
			return fmt.Errorf("target %q: %w", cfg.Target, err)
		}
		return nil
	}
	switch {
	case cfg.Source.IsValid():
		return fmt.Errorf("source %v: a client in a cluster's pod dials from the pod's address", cfg.Source)
	case cfg.Dial != nil:
		return errors.New("dial: a client in a cluster's pod dials as its process does")
	case cfg.Resolver != ResolverGRPC && cfg.Resolver != ResolverKubernetes:
		return fmt.Errorf("resolver %q: a client in a cluster's pod takes %q or %q", cfg.Resolver, ResolverGRPC, ResolverKubernetes)
	case cfg.Target == "":
		return errors.New("no target")
	}
	return nil
}

// CheckTarget refuses a target whose resolution or connections could leave
// the lab's addresses (package loopback): a dns:// target must name its DNS
// server, at an address loopback takes (without one, or without a scheme,
// grpc-go would ask the host's resolver, which may be anywhere); a
// passthrough:/// target must be such an address; the "kubernetes"
// resolver asks the lab's API, the "xds" one the lab's control plane, at an
// xds:/// target. Other schemes are refused. (A tester's
// `lab load dns://8.8.8.8/...` sent DNS queries off the machine.)
func CheckTarget(target, resolver string) error {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok {
		return fmt.Errorf("no scheme: grpc-go would resolve it through the host's DNS; write dns://DNS_IP:PORT/NAME:PORT or passthrough:///IP:PORT")
	}
	authority, endpoint, _ := strings.Cut(rest, "/")
	switch {
	case resolver == ResolverKubernetes:
		return nil
	case resolver == ResolverXDS:
		// The control plane names the endpoints; the channel's dialer
		// checks each connection's address (dialFor).
		if scheme != "xds" || authority != "" {
			return fmt.Errorf("resolver xds: want xds:///NAME.NAMESPACE:PORT")
		}
		return nil
	case scheme == "dns":
		if authority == "" {
			return fmt.Errorf("dns:/// resolves through the host's DNS; name the lab's: dns://DNS_IP:PORT/NAME:PORT")
		}
		if _, _, err := net.SplitHostPort(authority); err != nil {
			authority = net.JoinHostPort(authority, "53")
		}
		return loopback.CheckAddr(authority)
	case scheme == "passthrough":
		return loopback.CheckAddr(endpoint)
	}
	return fmt.Errorf("scheme %q: want dns://DNS_IP:PORT/NAME:PORT or passthrough:///IP:PORT", scheme)
}
