package kubelet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podlog"
	"github.com/pinlab/pinlab/internal/workload"
)

// XDSServer runs one container of the pinlab image's xDS control plane
// (`pinlab xds serve`) on the node, as the image's process runs it, until
// ctx ends (its SIGTERM or SIGKILL), and returns its exit code (package
// xds's Main). It is called on a goroutine of its own per container run;
// it must return soon after ctx ends.
type XDSServer func(ctx context.Context, c XDSContainer) int

// XDSContainer is what the node gives a container of the xDS control
// plane: its args, its in-cluster credentials and its pod's network.
type XDSContainer struct {
	// Args are the container's pinlab args, the first "xds"
	// (workload.ContainerArgs).
	Args []string
	// REST is the pod's in-cluster config (Config.APIServer with the
	// pod's service-account token); nil when it has none, and NoREST
	// says why.
	REST   *rest.Config
	NoREST error
	// Listen opens its listener on the pod IP, inside the pod's own
	// network namespace when it has one: an address without a host, or
	// with 0.0.0.0 or ::, is the pod IP (every address of the pod, as
	// the image's default ":18000" means in a cluster).
	Listen func(ctx context.Context, addr string) (net.Listener, error)
	// Stdout and Stderr are the container's log, line by line.
	Stdout, Stderr io.Writer
}

// xdsProcess returns the process of pod p's xDS control plane container,
// writing to out. It errs (the container cannot start) when the node runs
// no xDS control planes (no Config.XDSServer). The container starts
// without credentials when the node gives none; it then exits 1, saying
// why, as the image's process does.
func (w *podWorker) xdsProcess(ctx context.Context, p *corev1.Pod, out *podlog.Log) (process, error) {
	run := w.k.cfg.XDSServer
	if run == nil {
		return nil, errors.New("this node runs no xDS control planes (kubelet.Config.XDSServer)")
	}
	spec, _ := w.k.pinlabSpec(&p.Spec)
	args, err := workload.ContainerArgs(&spec.Containers[0])
	if err != nil {
		return nil, err
	}
	errs := &tailWriter{out: out}
	c := XDSContainer{Args: args, Stdout: &tailWriter{out: out}, Stderr: errs}
	c.REST, c.NoREST = w.inClusterConfig(ctx, p)
	listen := loopback.Listen
	if sb := w.sandbox; sb != nil {
		listen = sandboxListen(sb)
	}
	ip := w.ip
	c.Listen = func(ctx context.Context, addr string) (net.Listener, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
			addr = net.JoinHostPort(ip.String(), port)
		}
		return listen(ctx, addr)
	}
	return &commandProcess{run: func(ctx context.Context) int { return run(ctx, c) }, errs: errs}, nil
}

// Service-account token requests, as the kubelet makes them for a pod's
// projected token: an hour, renewed at 80 % of its life.
const (
	tokenSeconds      = 3600
	tokenRenewAt      = 0.8
	tokenRequestLimit = 10 * time.Second
)

// inClusterConfig is the in-cluster config a container of pod p gets:
// Config.APIServer's address and CA (what rest.InClusterConfig reads from
// the kubernetes Service's variables and ca.crt) with client-go's default
// rate limits, authenticated by a token of the pod's service account
// (spec.serviceAccountName, "default" when empty). The token comes from
// the TokenRequest API, bound to the pod, as the kubelet's projected
// service-account volume gets it: requested once now (an error here, such
// as a missing service account, is the container's; the kubelet would hold
// the pod in ContainerCreating and retry), then again at 80 % of its hour
// and after a 401. It errs when the node gives no credentials
// (Config.APIServer nil) or the pod opts out
// (automountServiceAccountToken: false).
func (w *podWorker) inClusterConfig(ctx context.Context, p *corev1.Pod) (*rest.Config, error) {
	base := w.k.cfg.APIServer
	if base == nil {
		return nil, errors.New("this node gives pods no service-account credentials (kubelet.Config.APIServer)")
	}
	if a := p.Spec.AutomountServiceAccountToken; a != nil && !*a {
		return nil, errors.New("the pod sets automountServiceAccountToken: false")
	}
	src := &podToken{ctx: ctx, client: w.k.client, pod: p, sa: cmp.Or(p.Spec.ServiceAccountName, "default")}
	tokens := transport.NewCachedTokenSource(src)
	if _, err := tokens.Token(); err != nil {
		return nil, err
	}
	rc := rest.AnonymousClientConfig(base)
	rc.QPS, rc.Burst, rc.RateLimiter, rc.UserAgent = 0, 0, nil, ""
	rc.WrapTransport = transport.ResettableTokenSourceWrapTransport(tokens)
	return rc, nil
}

// podToken requests tokens of service account sa bound to pod, through
// client (the node's), while ctx (the kubelet's) lasts. Each token's
// Expiry is when to renew it: 80 % of its life.
type podToken struct {
	ctx    context.Context
	client kubernetes.Interface
	pod    *corev1.Pod
	sa     string

	mu sync.Mutex // one request at a time
}

func (t *podToken) Token() (*oauth2.Token, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.ctx, tokenRequestLimit)
	defer cancel()
	secs := int64(tokenSeconds)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &secs,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: t.pod.Name, UID: t.pod.UID},
	}}
	issued := time.Now()
	got, err := t.client.CoreV1().ServiceAccounts(t.pod.Namespace).CreateToken(ctx, t.sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("a token for service account %s/%s: %w", t.pod.Namespace, t.sa, err)
	}
	life := got.Status.ExpirationTimestamp.Sub(issued)
	return &oauth2.Token{AccessToken: got.Status.Token, Expiry: issued.Add(time.Duration(float64(life) * tokenRenewAt))}, nil
}
