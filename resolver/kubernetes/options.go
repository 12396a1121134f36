package kubernetes

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// An Option configures a Builder.
type Option func(*options)

type options struct {
	client     Client
	kubeconfig *string // nil: in-cluster first
	resync     time.Duration
	logger     *slog.Logger
	registerer prometheus.Registerer
	fallback   bool
	scheme     string
}

// WithClient makes the Builder use client for every target instead of
// building one from the pod's service account or a kubeconfig. Any
// clientset (k8s.io/client-go/kubernetes.Interface) is a Client, its fake
// (k8s.io/client-go/kubernetes/fake) and a client of a test API server
// included. Default: none, the Builder builds its own on the first Build.
func WithClient(client Client) Option {
	return func(o *options) { o.client = client }
}

// WithKubeconfig makes the Builder connect with the kubeconfig file at
// path, as kubectl --kubeconfig does, for clients outside a cluster; ""
// means kubectl's default search ($KUBECONFIG, then ~/.kube/config).
// Targets without a namespace then take the current context's namespace.
// Without this option the Builder uses the pod's service account
// (rest.InClusterConfig) and falls back to kubectl's default search when
// the process is not in a cluster.
func WithKubeconfig(path string) Option {
	return func(o *options) { o.kubeconfig = &path }
}

// WithResync sets the informer's resync period: every period the
// resolver re-reads its cache and re-publishes if it differs from what the
// channel has. It never asks the API server: the watch keeps the cache
// current, and client-go re-lists by itself when a watch breaks. Default 0,
// no resync; negative is taken as 0.
func WithResync(period time.Duration) Option {
	return func(o *options) { o.resync = max(period, 0) }
}

// WithLogger sets where the resolver logs: a line when an error starts
// (list or watch failure, no endpoints, missing Service) and when it ends,
// at Warn and Info; each update at Debug. Default slog.Default(); nil
// discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		o.logger = l
	}
}

// WithRegisterer registers the resolver's metrics (see the package
// documentation) with reg. Builders sharing a registerer share the
// metrics. Default: no metrics.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.registerer = reg }
}

// WithTerminatingFallback publishes, when a Service has no ready endpoint,
// its endpoints that are serving and terminating (pods shutting down that
// still pass their readiness probe), as kube-proxy does since Kubernetes
// 1.26 (KEP-1669) so that a rollout whose old pods are all terminating
// keeps serving. Default off: only ready endpoints, as kuberesolver.
func WithTerminatingFallback() Option {
	return func(o *options) { o.fallback = true }
}

// WithScheme sets the scheme the Builder serves; default "kubernetes".
// Use another to run beside sercand/kuberesolver, which registers the same
// scheme.
func WithScheme(scheme string) Option {
	return func(o *options) { o.scheme = scheme }
}
