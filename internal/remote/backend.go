package remote

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/pinlab/pinlab/internal/kubeapi"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/podforward"
	"github.com/pinlab/pinlab/internal/runner"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Backend starts each variant in a namespace of the cluster
// (runner.Backend). Variants run side by side: the cluster's scheduler
// places their pods.
type Backend struct{ cfg Config }

var _ runner.Backend = (*Backend)(nil)

// New returns a Backend; it checks cfg and makes no call.
func New(cfg Config) (*Backend, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.PullTimeout == 0 {
		cfg.PullTimeout = DefaultPullTimeout
	}
	if cfg.LeaseRenew == 0 {
		cfg.LeaseRenew = DefaultLeaseRenew
	}
	return &Backend{cfg: cfg}, nil
}

// MaxClusters is 0: a cluster holds every variant at once.
func (b *Backend) MaxClusters() int { return 0 }

// Start creates the variant's namespace (Namespace(Run, Index), labelled
// RunLabel and VariantLabel) and the run's token Secret in it, and
// returns once the namespace's informers have synced. It holds the
// namespace's Lease (LeaseName) until Close. The variant's
// objects must all be in that namespace (plan.Variant.InNamespaces). On an
// error, or when ctx ends, what it created is deleted again.
func (b *Backend) Start(ctx context.Context, s runner.Setup) (_ runner.Cluster, err error) {
	ns := Namespace(b.cfg.Run, s.Index)
	if err := inNamespace(s.Variant, ns); err != nil {
		return nil, err
	}
	cs := b.cfg.Clientset
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{RunLabel: b.cfg.Run, VariantLabel: labelValue(s.Variant.Name)}}}, metav1.CreateOptions{})
	if err != nil {
		if ctx.Err() != nil { // the API server may have created it
			deleteNamespaces(cs, []string{ns}, b.cfg.logger())
		}
		return nil, fmt.Errorf("create namespace %s: %w", ns, err)
	}
	c := &Cluster{cfg: b.cfg, namespace: ns, stop: make(chan struct{}), failed: make(chan struct{})}
	c.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	c.forward = &podforward.PortForward{Config: b.cfg.REST, Pod: c.podByIP}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := c.holdLease(ctx); err != nil {
		return nil, err
	}
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: TokenSecret, Labels: map[string]string{RunLabel: b.cfg.Run}},
		Data:       map[string][]byte{TokenKey: []byte(b.cfg.Token)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create secret %s/%s: %w", ns, TokenSecret, err)
	}
	c.api = kubeapi.Client{Clientset: cs, Factory: c.factory, Permanent: b.pullFailed, Namespaces: []string{ns}}
	c.admin = &http.Client{Transport: &http.Transport{DialContext: podDialer(c.forward, AdminPort), DisableKeepAlives: true}, Timeout: adminTimeout}
	// Every informer kubeapi reads but the Namespaces' (cluster-scoped:
	// the run's RBAC lists only its own namespaces, by label).
	synced := []cache.InformerSynced{
		c.factory.Core().V1().Services().Informer().HasSynced,
		c.factory.Core().V1().Pods().Informer().HasSynced,
		c.factory.Apps().V1().Deployments().Informer().HasSynced,
		c.factory.Apps().V1().StatefulSets().Informer().HasSynced,
		c.factory.Discovery().V1().EndpointSlices().Informer().HasSynced,
	}
	c.factory.Start(c.stop)
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		return nil, fmt.Errorf("namespace %s: its Services, pods, Deployments, StatefulSets and EndpointSlices not listed within %v: %w", ns, syncTimeout, context.Cause(sctx))
	}
	return c, nil
}

// syncTimeout bounds the first listing of a variant's namespace.
const syncTimeout = time.Minute

// inNamespace checks that every object of v is in namespace ns.
func inNamespace(v plan.Variant, ns string) error {
	for _, o := range v.Objects {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		got := m.GetNamespace()
		if _, isNS := o.(*corev1.Namespace); isNS {
			got = m.GetName()
		}
		if got != ns {
			return fmt.Errorf("variant %s: %T %s is in namespace %q, not the variant's %q", v.Name, o, m.GetName(), got, ns)
		}
	}
	return nil
}

// labelValue makes s a label value: at most 63 characters of
// [A-Za-z0-9-_.], starting and ending with an alphanumeric one.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	for len(b) > 0 && !alnum(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && !alnum(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return string(b)
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// pullFailed is the WaitWorkloads policy of a real cluster: a bad image
// name fails at once; a pull that fails (ErrImagePull, ImagePullBackOff)
// or a container the kubelet cannot configure fails once the pod has
// waited PullTimeout: the kubelet keeps retrying, so a wait without that
// bound would last until the setup timeout.
func (b *Backend) pullFailed(p *corev1.Pod, reason string) bool {
	switch reason {
	case "InvalidImageName":
		return true
	case "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError":
		return time.Since(p.CreationTimestamp.Time) > b.cfg.PullTimeout
	}
	return false
}

// podByIP names the namespace's pod with ip (podforward's Pod).
func (c *Cluster) podByIP(ip netip.Addr) (namespace, name string, ok bool) {
	pods, _ := c.factory.Core().V1().Pods().Lister().Pods(c.namespace).List(everything)
	for _, p := range pods {
		if p.Status.PodIP == ip.String() && p.DeletionTimestamp == nil {
			return p.Namespace, p.Name, true
		}
	}
	return "", "", false
}

var everything = labels.Everything()
