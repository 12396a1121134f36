package kubernetes

import (
	"fmt"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is the part of a Kubernetes clientset the resolver uses: list and
// watch of EndpointSlices (DiscoveryV1) and get of a Service (CoreV1). A
// full clientset (k8s.io/client-go/kubernetes.Interface, its fake included)
// satisfies it, so WithClient takes one as is; the package itself builds
// only these two API groups' clients, not a clientset, so a binary that
// uses it does not link the clients of the other groups (see "Binary size"
// in the package documentation).
//
// The resolvers of a Builder call it from their own goroutines at once, as
// they would a clientset: its methods must be safe for concurrent use.
type Client interface {
	DiscoveryV1() discoveryv1client.DiscoveryV1Interface
	CoreV1() corev1client.CoreV1Interface
}

// typedClients is the Client the Builder makes from a rest.Config.
type typedClients struct {
	discovery *discoveryv1client.DiscoveryV1Client
	core      *corev1client.CoreV1Client
}

func (c typedClients) DiscoveryV1() discoveryv1client.DiscoveryV1Interface { return c.discovery }
func (c typedClients) CoreV1() corev1client.CoreV1Interface                { return c.core }

// newClient builds the two groups' clients from cfg as
// kubernetes.NewForConfig builds its own: with one HTTP client (one
// connection pool) and, when cfg sets QPS but no RateLimiter, one rate
// limiter shared by both.
func newClient(cfg *rest.Config) (Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "grpc-kubernetes-resolver " + rest.DefaultKubernetesUserAgent()
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("burst must be above 0 when QPS is set (%v) without a RateLimiter", cfg.QPS)
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	var c typedClients
	if c.discovery, err = discoveryv1client.NewForConfigAndClient(cfg, hc); err != nil {
		return nil, err
	}
	if c.core, err = corev1client.NewForConfigAndClient(cfg, hc); err != nil {
		return nil, err
	}
	return c, nil
}
