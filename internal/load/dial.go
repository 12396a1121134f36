package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/lbpolicy"
	"github.com/pinlab/pinlab/internal/load/cachedns"
	"github.com/pinlab/pinlab/internal/loopback"
	kuberesolver "github.com/pinlab/pinlab/resolver/kubernetes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	_ "google.golang.org/grpc/balancer/leastrequest"       // least_request
	_ "google.golang.org/grpc/balancer/ringhash"           // ring_hash
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // weighted_round_robin
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // enables client-side health checking
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
)

// onceTimeout bounds the "once" resolver's lookup.
const onceTimeout = 5 * time.Second

// newChannel builds a channel from cfg (already defaulted). Like
// grpc.NewClient it does no I/O: the channel resolves and connects on
// conn.Connect or its first call.
func newChannel(cfg Config) (*channel, error) {
	sc, err := serviceConfigJSON(cfg)
	if err != nil {
		return nil, fmt.Errorf("load: client %s: %w", cfg.Name, err)
	}
	conns := newConnTable()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(conns.dialer(tcpDialer(dialFor(cfg)))),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: cfg.ConnectTimeout}),
		grpc.WithDefaultServiceConfig(sc),
		grpc.WithStatsHandler(statsHandler(cfg.Observer, conns)),
	}
	rb, err := resolverFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("load: client %s: %w", cfg.Name, err)
	}
	if rb != nil {
		opts = append(opts, grpc.WithResolvers(rb))
	}
	conn, err := grpc.NewClient(cfg.Target, opts...)
	if err != nil {
		return nil, fmt.Errorf("load: client %s: %w", cfg.Name, err)
	}
	ch := &channel{cfg: cfg, conn: conn, client: pricingv1.NewPricingClient(conn)}
	if cfg.Policy == lbpolicy.RingHash || cfg.Resolver == ResolverXDS {
		// ring_hash may hash it (over xDS the Service's policy decides).
		ch.md = metadata.Pairs(lbpolicy.ClientHeader, cfg.Name)
	}
	if cfg.WaitForReady {
		ch.opts = append(ch.opts, grpc.WaitForReady(true))
	}
	return ch, nil
}

// dialFor returns how cfg's client opens its sockets, the channel's TCP
// connections and its resolver's DNS queries: through cfg.Dial, else with
// package loopback's Dialer from cfg.Source, either way to the lab's
// addresses only; or, InCluster, as any client of the process.
func dialFor(cfg Config) cachedns.DialFunc {
	switch {
	case cfg.InCluster:
		var d net.Dialer
		return d.DialContext
	case cfg.Dial != nil:
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			if err := loopback.CheckAddr(addr); err != nil {
				return nil, err
			}
			return cfg.Dial(ctx, network, addr)
		}
	}
	return loopback.Dialer{Source: cfg.Source}.Dial
}

// tcpDialer is dial's TCP, as grpc.WithContextDialer takes it.
func tcpDialer(dial cachedns.DialFunc) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }
}

// resolverFor returns the channel's own resolver (for the "dns" scheme, or
// the "kubernetes" one), or nil for grpc-go's. With Config.Dial, the
// "grpc" resolver is grpc-go's behind a relay (relayBuilder), so that its
// queries leave through Dial too.
func resolverFor(cfg Config) (resolver.Builder, error) {
	switch cfg.Resolver {
	case ResolverXDS:
		return cfg.XDS, nil
	case ResolverKubernetes:
		if !strings.HasPrefix(cfg.Target, kuberesolver.Scheme+"://") {
			return nil, fmt.Errorf("resolver %q: target %q, want kubernetes://namespace/service:port", cfg.Resolver, cfg.Target)
		}
		return kuberesolver.NewBuilder(kuberesolver.WithClient(cfg.Kubernetes), kuberesolver.WithLogger(nil)), nil
	case ResolverCached:
		if _, err := cachedns.ParseTarget(cfg.Target); err != nil {
			return nil, fmt.Errorf("resolver %q: %w", cfg.Resolver, err)
		}
		return cachedns.NewBuilder(cachedns.Config{
			Source: cfg.Source, Dial: dialFor(cfg), MinResolutionInterval: cfg.MinResolutionInterval, CacheTTL: cfg.CacheTTL,
		})
	case ResolverOnce:
		t, err := cachedns.ParseTarget(cfg.Target)
		if err != nil {
			return nil, fmt.Errorf("resolver %q: %w", cfg.Resolver, err)
		}
		return onceBuilder{dial: dialFor(cfg), target: t}, nil
	case ResolverGRPC:
		if cfg.Dial != nil {
			return relayBuilder{dial: dialFor(cfg)}, nil
		}
	}
	return nil, nil
}

// serviceConfig is the JSON service config (gRFC A2) a client's channel
// gets as its default.
type serviceConfig struct {
	LoadBalancingConfig []map[string]any   `json:"loadBalancingConfig,omitempty"`
	HealthCheckConfig   *healthCheckConfig `json:"healthCheckConfig,omitempty"`
	MethodConfig        []methodConfig     `json:"methodConfig,omitempty"`
}

type healthCheckConfig struct {
	ServiceName string `json:"serviceName"`
}

type methodConfig struct {
	Name        []methodName `json:"name"`
	RetryPolicy *retryPolicy `json:"retryPolicy,omitempty"`
}

type methodName struct {
	Service string `json:"service"`
}

type retryPolicy struct {
	MaxAttempts       int     `json:"maxAttempts"`
	InitialBackoff    string  `json:"initialBackoff"`
	MaxBackoff        string  `json:"maxBackoff"`
	BackoffMultiplier float64 `json:"backoffMultiplier"`
	// RetryableStatusCodes are numeric: grpc-go accepts numbers and the
	// upper-case names alike.
	RetryableStatusCodes []uint32 `json:"retryableStatusCodes"`
}

// serviceConfigJSON renders cfg's policy, health checking and retry
// policy. With the "xds" resolver there is no policy: the resolver's
// service config replaces the default one.
func serviceConfigJSON(cfg Config) (string, error) {
	service := pricingv1.Pricing_ServiceDesc.ServiceName
	var sc serviceConfig
	if cfg.Resolver != ResolverXDS {
		p, err := lbpolicy.Parse(cfg.Policy, cfg.PolicySettings)
		if err != nil {
			return "", err
		}
		sc.LoadBalancingConfig = []map[string]any{{p.GRPCName(): p.Settings()}}
	}
	if cfg.HealthCheck {
		sc.HealthCheckConfig = &healthCheckConfig{ServiceName: service}
	}
	if rp := cfg.Retry; rp != nil {
		jrp := &retryPolicy{
			MaxAttempts:       rp.MaxAttempts,
			InitialBackoff:    protoDuration(rp.InitialBackoff),
			MaxBackoff:        protoDuration(rp.MaxBackoff),
			BackoffMultiplier: rp.BackoffMultiplier,
		}
		for _, c := range rp.RetryableStatusCodes {
			jrp.RetryableStatusCodes = append(jrp.RetryableStatusCodes, uint32(c))
		}
		sc.MethodConfig = []methodConfig{{Name: []methodName{{Service: service}}, RetryPolicy: jrp}}
	}
	b, err := json.Marshal(sc)
	return string(b), err
}

// protoDuration is d in the JSON form of google.protobuf.Duration, e.g.
// "0.100000000s".
func protoDuration(d time.Duration) string {
	return fmt.Sprintf("%d.%09ds", d/time.Second, d%time.Second)
}
