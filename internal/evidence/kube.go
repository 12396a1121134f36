package evidence

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kube lists objects from a Kubernetes API server found as kubectl finds
// it: client-go's standard loading rules (--kubeconfig, else $KUBECONFIG,
// else ~/.kube/config), the current or named context, kubectl's
// overrides (--cluster, --user, --as, --as-group, --as-uid), and the
// in-cluster config (the pod's service account) when no kubeconfig gives
// a cluster and the process runs in a pod. The server is contacted
// wherever it is, with the kubeconfig's credentials (exec plugins
// included), proxy and TLS. Pods are then reached through the API
// server's port-forward (PortForward, with Config and PodByIP), or
// directly (Direct) in-cluster or where pod IPs are routed.
type Kube struct {
	// Kubeconfig is an explicit kubeconfig file; empty means the loading
	// rules' default.
	Kubeconfig string
	// Context names the kubeconfig context; empty means the current one.
	Context string
	// Cluster and User name a kubeconfig cluster and user that replace
	// the context's; empty keeps the context's.
	Cluster, User string
	// As, AsGroups and AsUID impersonate a user, its groups and UID, as
	// kubectl's --as, --as-group and --as-uid; empty: nobody.
	As       string
	AsGroups []string
	AsUID    string
	// Namespace is the namespace to list Services and EndpointSlices in;
	// pods are listed in every namespace when RBAC allows it, else there.
	// Empty means kubectl's default, which Load sets: the context's
	// namespace, in-cluster the pod's own, else "default".
	Namespace string

	config    *rest.Config
	inCluster bool
	mu        sync.Mutex
	podsByIP  map[netip.Addr]podRef
}

// podRef names a pod.
type podRef struct {
	namespace, name string
	rank            int // lower is preferred for an IP several pods have
}

// Load reads the kubeconfig (or the in-cluster config) and returns the API
// server's address; it does no I/O beyond reading files. Errors say which
// files and context were tried: a missing or oversized file, an unknown
// context, cluster or user.
func (k *Kube) Load() (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	if err := checkKubeconfigFiles(rules); err != nil {
		return "", err
	}
	overrides := &clientcmd.ConfigOverrides{
		CurrentContext: k.Context,
		Context:        clientcmdapi.Context{Cluster: k.Cluster, AuthInfo: k.User, Namespace: k.Namespace},
		AuthInfo:       clientcmdapi.AuthInfo{Impersonate: k.As, ImpersonateGroups: k.AsGroups, ImpersonateUID: k.AsUID},
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: %w", describe(rules, k.Context), err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: namespace: %w", describe(rules, k.Context), err)
	}
	// client-go's deferred loading falls back to the in-cluster config
	// when the files give no cluster and the process runs in a pod.
	raw, err := cc.RawConfig()
	k.inCluster = err == nil && len(raw.Clusters) == 0 && os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if cfg.Timeout == 0 {
		cfg.Timeout = ObjectsTimeout
	}
	k.config, k.Namespace = cfg, ns
	return cfg.Host, nil
}

// Config returns the API server's client config (nil before Load). Its
// Timeout bounds each request (ObjectsTimeout unless the kubeconfig
// says).
func (k *Kube) Config() *rest.Config { return k.config }

// InCluster reports whether Load took the in-cluster config: pods are then
// on a network this process reaches directly.
func (k *Kube) InCluster() bool { return k.inCluster }

// PodByIP returns the namespace and name of the pod with IP ip among those
// Objects listed last: one of Namespace's before the others', one not
// using the node's network before one that does.
func (k *Kube) PodByIP(ip netip.Addr) (namespace, name string, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.podsByIP[ip]
	return p.namespace, p.name, ok
}

// remember indexes pods by IP for PodByIP.
func (k *Kube) remember(pods []corev1.Pod) {
	byIP := map[netip.Addr]podRef{}
	for _, p := range pods {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		r := podRef{namespace: p.Namespace, name: p.Name}
		if p.Namespace != k.Namespace {
			r.rank += 2
		}
		if p.Spec.HostNetwork {
			r.rank++
		}
		if old, ok := byIP[ip]; !ok || r.rank < old.rank {
			byIP[ip] = r
		}
	}
	k.mu.Lock()
	k.podsByIP = byIP
	k.mu.Unlock()
}

func describe(rules *clientcmd.ClientConfigLoadingRules, context string) string {
	files := rules.ExplicitPath
	if files == "" {
		files = fmt.Sprint(rules.GetLoadingPrecedence())
	}
	if context == "" {
		context = "the current one"
	}
	return fmt.Sprintf("(files %s, context %s)", files, context)
}

// Objects lists the namespace's Services and EndpointSlices and the pods
// (every namespace if allowed). A Forbidden answer names the verb and
// resource RBAC refused.
func (k *Kube) Objects(ctx context.Context) (Objects, error) {
	if k.config == nil {
		if _, err := k.Load(); err != nil {
			return Objects{}, err
		}
	}
	cs, err := kubernetes.NewForConfig(k.config)
	if err != nil {
		return Objects{}, err
	}
	var o Objects
	svcs, err := cs.CoreV1().Services(k.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Objects{}, kubeError("list services", k.Namespace, err)
	}
	o.Services = svcs.Items
	slices, err := cs.DiscoveryV1().EndpointSlices(k.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Objects{}, kubeError("list endpointslices", k.Namespace, err)
	}
	o.EndpointSlices = slices.Items
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		pods, err = cs.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{})
	}
	if err != nil {
		return Objects{}, kubeError("list pods", k.Namespace, err)
	}
	o.Pods = pods.Items
	k.remember(o.Pods)
	// Deployments and StatefulSets only name the workload of a Service
	// without pods: RBAC may refuse them, and diagnose goes on without.
	if d, err := cs.AppsV1().Deployments(k.Namespace).List(ctx, metav1.ListOptions{}); err == nil {
		o.Deployments = d.Items
	}
	if st, err := cs.AppsV1().StatefulSets(k.Namespace).List(ctx, metav1.ListOptions{}); err == nil {
		o.StatefulSets = st.Items
	}
	return o, nil
}

func kubeError(what, ns string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the API server forbids %s in namespace %q (RBAC): %w", what, ns, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server refused the kubeconfig's credentials to %s (expired?): %w", what, err)
	}
	return fmt.Errorf("%s in namespace %q: %w", what, ns, err)
}

// String names the source.
func (k *Kube) String() string {
	switch {
	case k.config != nil && k.inCluster:
		return "in-cluster API server " + k.config.Host
	case k.config != nil:
		return "API server " + k.config.Host
	}
	return "kubeconfig"
}

// maxKubeconfig bounds a kubeconfig file's size: client-go reads a file
// whole, so /dev/zero or a huge file would take all memory (a tester's run
// reached 23.9 GB).
const maxKubeconfig = 16 << 20

// checkKubeconfigFiles refuses kubeconfig files client-go would load that
// are not regular files or are larger than maxKubeconfig.
func checkKubeconfigFiles(rules *clientcmd.ClientConfigLoadingRules) error {
	paths := rules.GetLoadingPrecedence()
	if rules.ExplicitPath != "" {
		paths = []string{rules.ExplicitPath}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			continue // a missing file is client-go's to report (or skip)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("kubeconfig %s: not a regular file (%v)", p, st.Mode().Type())
		}
		if st.Size() > maxKubeconfig {
			return fmt.Errorf("kubeconfig %s: %d bytes, more than the %d MiB a kubeconfig may have", p, st.Size(), maxKubeconfig>>20)
		}
	}
	return nil
}
