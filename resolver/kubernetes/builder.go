package kubernetes

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc/resolver"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Scheme is the target scheme a Builder serves unless WithScheme says
// otherwise.
const Scheme = "kubernetes"

func init() {
	resolver.Register(NewBuilder())
}

// Register registers a Builder with opts for its scheme in grpc-go's global
// registry, replacing the one this package registered for "kubernetes" at
// init (which uses the defaults). Like resolver.Register, call it at
// start-up, before creating channels; it is not safe to call concurrently
// with channel creation. To configure one channel only, pass NewBuilder to
// grpc.WithResolvers instead.
func Register(opts ...Option) {
	resolver.Register(NewBuilder(opts...))
}

// Builder builds a resolver for each channel with a kubernetes:// target.
// It holds the API client, built on the first Build and shared by its
// resolvers. Safe for concurrent use.
type Builder struct {
	o       options
	metrics *collector // nil without WithRegisterer

	mu        sync.Mutex
	client    Client
	defaultNS string
}

// NewBuilder returns a Builder configured by opts. It does no I/O: the API
// client is built (from WithClient, the service account or a kubeconfig)
// when the first channel needs it, and an error then fails that channel's
// resolver (grpc-go reports it on the channel's calls) until a later Build
// succeeds.
func NewBuilder(opts ...Option) *Builder {
	o := options{logger: slog.Default(), scheme: Scheme}
	for _, opt := range opts {
		opt(&o)
	}
	b := &Builder{o: o}
	if o.registerer != nil {
		b.metrics = registerCollector(o.registerer, o.logger)
	}
	return b
}

// Scheme returns the scheme the Builder serves.
func (b *Builder) Scheme() string { return b.o.scheme }

// Build parses target, starts watching the Service's EndpointSlices and
// returns at once; the first addresses reach cc when the initial list is
// in, and every change after that within milliseconds. The returned
// resolver's Close stops everything it started.
func (b *Builder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	client, ns, err := b.api()
	if err != nil {
		return nil, err
	}
	tg, err := parseTarget(t, ns)
	if err != nil {
		return nil, err
	}
	r := newResolver(tg, cc, client, b.o, b.metrics.target(tg.String()))
	r.start()
	return r, nil
}

// api returns the API client and the namespace of targets that name none,
// building them once.
func (b *Builder) api() (Client, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client != nil {
		return b.client, b.defaultNS, nil
	}
	client, ns, err := b.newClient()
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes resolver: %w", err)
	}
	b.client, b.defaultNS = client, ns
	return client, ns, nil
}

func (b *Builder) newClient() (Client, string, error) {
	if b.o.client != nil {
		return b.o.client, podNamespace(), nil
	}
	if b.o.kubeconfig == nil {
		cfg, err := rest.InClusterConfig()
		if err == nil {
			c, err := newClient(cfg)
			return c, podNamespace(), err
		}
		if !errors.Is(err, rest.ErrNotInCluster) {
			return nil, "", fmt.Errorf("in-cluster config: %w", err)
		}
		// Not in a pod: do as kubectl does.
		path := ""
		b.o.kubeconfig = &path
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *b.o.kubeconfig
	kc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := kc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := kc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := newClient(cfg)
	return c, ns, err
}
