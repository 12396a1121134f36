package kubelet

import (
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
	// REST is the pod's in-cluster config (see inClusterConfig); nil
	// when it has none, and NoREST says why.
	REST   *rest.Config
	NoREST error
	// Listen opens a listener as a process of the pod would: an address
	// without a host, or with 0.0.0.0 or ::, is the pod IP (every address
	// of the pod, as the image's default ":18000" means in a cluster); in
	// the pod's own network namespace any of its addresses will do, else
	// (the pods share the node's namespace) only the pod IP.
	Listen func(ctx context.Context, addr string) (net.Listener, error)
	// Stdout and Stderr are the container's log, line by line.
	Stdout, Stderr io.Writer
}

// xdsProcess returns the process of pod p's xDS control plane container,
// writing to out. It errs (the container cannot start) when the node runs
// no xDS control planes (no Config.XDSServer). Its credentials are made
// when it starts, with its context (see inClusterConfig); without them it
// exits 1 saying why, as the image's process does.
func (w *podWorker) xdsProcess(p *corev1.Pod, out *podlog.Log) (process, error) {
	run := w.k.cfg.XDSServer
	if run == nil {
		return nil, errors.New("this node runs no xDS control planes (kubelet.Config.XDSServer)")
	}
	args, stdout, stderr, err := w.commandArgs(p, out)
	if err != nil {
		return nil, err
	}
	client, base, listen := w.k.client, w.k.cfg.APIServer, podListen(w.ip, w.sandbox != nil, w.podListener())
	return &commandProcess{errs: stderr, run: func(ctx context.Context) int {
		c := XDSContainer{Args: args, Listen: listen, Stdout: stdout, Stderr: stderr}
		c.REST, c.NoREST = inClusterConfig(ctx, client, base, p)
		if ctx.Err() != nil {
			return 0 // stopped while starting: a SIGTERM, not a failure
		}
		return run(ctx, c)
	}}, nil
}

// podListener is how the pod's processes listen: inside its own network
// namespace when it has one, else in the node's (package loopback's
// checks in both).
func (w *podWorker) podListener() func(ctx context.Context, addr string) (net.Listener, error) {
	if sb := w.sandbox; sb != nil {
		return sandboxListen(sb)
	}
	return loopback.Listen
}

// podListen maps a process's listen address to pod ip, then listens
// there: a missing or unspecified host is the pod IP; without a namespace
// of the pod's own (own false) any other host is refused, since it would
// be the node's (its loopback) or another pod's address.
func podListen(ip netip.Addr, own bool, listen func(ctx context.Context, addr string) (net.Listener, error)) func(ctx context.Context, addr string) (net.Listener, error) {
	return func(ctx context.Context, addr string) (net.Listener, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		a, perr := netip.ParseAddr(host)
		switch {
		case host == "" || perr == nil && a.IsUnspecified():
			addr = net.JoinHostPort(ip.String(), port)
		case !own && (perr != nil || a.Unmap() != ip):
			return nil, fmt.Errorf("listen %s: want the pod IP %s, 0.0.0.0 or no host: the lab's pods share the node's network namespace", addr, ip)
		}
		return listen(ctx, addr)
	}
}

// Service-account tokens, as the kubelet requests them for the
// kube-api-access projected volume: 3607 s asked (kube-apiserver may issue
// longer and still report this), renewed once 80 % of that has passed
// (the kubelet's token manager: 20 % before the reported expiry).
const (
	tokenSeconds      = 3607
	tokenRenewBefore  = 0.2
	tokenRequestLimit = 10 * time.Second
)

// inClusterConfig is the in-cluster config a container of pod p gets
// while ctx (the container's run) lasts: base's address and CA (what
// rest.InClusterConfig reads from the kubernetes Service's variables and
// ca.crt; base's own credentials are not used) with client-go's default
// rate limits, authenticated by a token of the pod's service account
// (spec.serviceAccountName, "default" when empty) that client requests
// (TokenRequest, bound to the pod) now and again when renewal is due, and
// after a 401. It errs, as a pod without a token would, when base is nil
// (the node gives none), when the pod or else its service account sets
// automountServiceAccountToken false (the ServiceAccount admission
// plugin's rule), or when the service account or the first token cannot
// be had. Differences from a real pod: no token file is mounted, and a
// 401 asks for a new token, where client-go in a pod re-reads its file.
func inClusterConfig(ctx context.Context, client kubernetes.Interface, base *rest.Config, p *corev1.Pod) (*rest.Config, error) {
	if base == nil {
		return nil, errors.New("this node gives pods no service-account credentials (kubelet.Config.APIServer)")
	}
	name := p.Spec.ServiceAccountName
	if name == "" {
		name = "default"
	}
	gctx, cancel := context.WithTimeout(ctx, tokenRequestLimit)
	sa, err := client.CoreV1().ServiceAccounts(p.Namespace).Get(gctx, name, metav1.GetOptions{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("service account %s/%s: %w", p.Namespace, name, err)
	}
	mount := p.Spec.AutomountServiceAccountToken
	if mount == nil {
		mount = sa.AutomountServiceAccountToken
	}
	if mount != nil && !*mount {
		return nil, fmt.Errorf("automountServiceAccountToken is false (on the pod or its service account %s): no token", name)
	}
	tokens := transport.NewCachedTokenSource(&podToken{ctx: ctx, client: client, pod: p, sa: name})
	if _, err := tokens.Token(); err != nil {
		return nil, err
	}
	rc := rest.AnonymousClientConfig(base)
	rc.QPS, rc.Burst, rc.RateLimiter, rc.UserAgent = 0, 0, nil, ""
	rc.WrapTransport = transport.ResettableTokenSourceWrapTransport(tokens)
	return rc, nil
}

// podToken requests tokens of service account sa bound to pod, through
// client (the node's), while ctx (the container's run) lasts: each
// request bounded by tokenRequestLimit, one at a time. A token's Expiry
// is when to renew it.
type podToken struct {
	ctx    context.Context
	client kubernetes.Interface
	pod    *corev1.Pod
	sa     string

	mu sync.Mutex
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
	got, err := t.client.CoreV1().ServiceAccounts(t.pod.Namespace).CreateToken(ctx, t.sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("a token for service account %s/%s: %w", t.pod.Namespace, t.sa, err)
	}
	return renewal(got, time.Now())
}

// renewal is the oauth2 token of TokenRequest tr answered at now, its
// Expiry when the kubelet would renew it: tokenRenewBefore of its
// requested length before the reported expiry. An empty token, or one that
// would be due for renewal already, is an error.
func renewal(tr *authenticationv1.TokenRequest, now time.Time) (*oauth2.Token, error) {
	secs := int64(tokenSeconds)
	if s := tr.Spec.ExpirationSeconds; s != nil && *s > 0 {
		secs = *s
	}
	exp := tr.Status.ExpirationTimestamp.Time
	renew := exp.Add(-time.Duration(float64(secs)*tokenRenewBefore) * time.Second)
	if tr.Status.Token == "" || !renew.After(now) {
		return nil, fmt.Errorf("TokenRequest answered token %q expiring %v: want a token, due for renewal after now (%v)", redact(tr.Status.Token), exp, now)
	}
	return &oauth2.Token{AccessToken: tr.Status.Token, Expiry: renew}, nil
}

// redact shows whether a token is there, not the token.
func redact(tok string) string {
	if tok == "" {
		return ""
	}
	return "<redacted>"
}
