package evidence

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"os"

	"github.com/pinlab/pinlab/internal/loopback"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Kube lists objects from a Kubernetes API server found as kubectl finds
// it: client-go's standard loading rules (--kubeconfig, else $KUBECONFIG,
// else ~/.kube/config) and the current or named context. Only a server
// inside 127.0.0.0/8 is contacted (a local control plane, or a remote one
// through `kubectl proxy` or a tunnel). Pods' channelz is then dialled at
// their pod IPs, which on a real cluster are outside 127.0.0.0/8 and so
// are refused: reaching them through the API server's port-forward is not
// built yet.
type Kube struct {
	// Kubeconfig is an explicit kubeconfig file; empty means the loading
	// rules' default.
	Kubeconfig string
	// Context names the kubeconfig context; empty means the current one.
	Context string
	// Namespace is the namespace to list Services and EndpointSlices in;
	// pods are listed in every namespace when RBAC allows it, else there.
	Namespace string

	config *rest.Config
}

// Load reads the kubeconfig and returns the API server's address. Errors
// say which file and context were tried: a missing file, an unknown
// context, a server outside 127.0.0.0/8.
func (k *Kube) Load() (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	if err := checkKubeconfigFiles(rules); err != nil {
		return "", err
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: %w", describe(rules, k.Context), err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: server %q: %w", describe(rules, k.Context), cfg.Host, err)
	}
	host := u.Hostname()
	if host == "localhost" {
		host = "127.0.0.1" // what kubectl's localhost means; other names are not resolved
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: server %s: give the API server as an IP inside 127.0.0.0/8 (pinlab resolves no names)", describe(rules, k.Context), cfg.Host)
	}
	if err := loopback.CheckIP(ip); err != nil {
		return "", fmt.Errorf("kubeconfig %s: server %s: %w (reach a remote cluster through `kubectl proxy` on 127.0.0.1)", describe(rules, k.Context), cfg.Host, err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = ObjectsTimeout
	}
	k.config = cfg
	return cfg.Host, nil
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
	if k.config != nil {
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
