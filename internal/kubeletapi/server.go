// Package kubeletapi serves the kubelet API of a lab's node on a real
// control plane, as the kubelet serves it on port 10250 (pkg/kubelet/server
// in Kubernetes v1.37.2): HTTPS with a serving certificate from the
// cluster's CA; every request authenticated (a client certificate of that
// CA, or a bearer token the API server's TokenReview accepts; anonymous
// requests get 401) and authorized by the API server's
// SubjectAccessReview on the node's subresources (a denial is 403). It
// serves:
//
//   - GET /healthz: "ok" (nodes/healthz);
//   - GET /pods: the pods the node runs, as a v1 PodList (nodes/pods);
//   - GET /containerLogs/NAMESPACE/POD/CONTAINER: a container's output
//     with the query parameters of the API server's pods/log (follow,
//     previous, tailLines, sinceSeconds, sinceTime, timestamps,
//     limitBytes) (nodes/proxy);
//   - GET and POST /portForward/NAMESPACE/POD[/UID]: port forwarding to
//     any port of the pod's address over SPDY or WebSocket, through
//     k8s.io/cri-streaming's portforward, as kubectl port-forward speaks
//     it through the API server (nodes/proxy);
//   - GET and POST /exec/NAMESPACE/POD[/UID]/CONTAINER?command=...: a
//     command of package podshell's built-in set (a pinlab pod is no
//     container image), with its exit code, through cri-streaming's
//     remotecommand (nodes/proxy);
//   - GET and POST /attach/NAMESPACE/POD[/UID]/CONTAINER: the container's
//     output from then on (nodes/proxy).
//
// run is not served (404; kubectl does not use it), nor /stats and
// /metrics (kubectl top needs metrics-server).
package kubeletapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pki"
	"github.com/pinlab/pinlab/internal/podlog"
	"github.com/pinlab/pinlab/internal/podshell"
)

// Port is the kubelet API's port, the kubelet's default (--port).
const Port = 10250

// Node is what the API reads of the node: the kubelet (package kubelet's
// Kubelet satisfies it).
type Node interface {
	// Pod returns the pod namespace/name if the node runs it.
	Pod(namespace, name string) (*corev1.Pod, bool)
	// Pods returns the pods the node runs.
	Pods() []*corev1.Pod
	// Logs returns the output of the pod's container (its running or last
	// run; with previous, the run before).
	Logs(namespace, name string, previous bool) (*podlog.Log, error)
	// EphemeralLog is the output of the pod's ephemeral container (a
	// pinlab-agent the node runs).
	EphemeralLog(namespace, name, container string) (*podlog.Log, error)
	// Shell returns what exec runs commands against (package podshell);
	// an error when the pod or its container does not run.
	Shell(namespace, name, container string) (podshell.Pod, error)
}

// Config configures a Server. Every field but Logger is required.
type Config struct {
	// NodeName is the Node the API belongs to: authorization asks about
	// its subresources.
	NodeName string
	// Addr is where to listen: the Node's InternalIP and Port. It must be
	// an address loopback allows (the lab's network namespace).
	Addr netip.AddrPort
	// CA is the cluster's CA: it signs the serving certificate (for Addr's
	// IP) and the client certificates accepted (the API server's).
	CA *pki.CA
	// Client reaches the API server for TokenReview and
	// SubjectAccessReview (create rights on both).
	Client kubernetes.Interface
	// Node is the node whose pods the API serves.
	Node Node
	// Logger receives refused and failed requests; nil discards them.
	Logger *slog.Logger
}

// Timeouts, as the kubelet's: a stream idle for StreamIdleTimeout is
// closed (--streaming-connection-idle-timeout, 4 h); a request must open
// its streams within streamCreationTimeout (30 s); headers must arrive
// within readHeaderTimeout.
const (
	StreamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
	readHeaderTimeout     = 10 * time.Second
	// Authentication and authorization answers are cached as the
	// kubelet's defaults (2 min for tokens; 5 min allowed, 30 s denied).
	tokenCacheTTL = 2 * time.Minute
	allowCacheTTL = 5 * time.Minute
	denyCacheTTL  = 30 * time.Second
)

// webhookBackoff is how TokenReview and SubjectAccessReview calls are
// retried: k8s.io/apiserver's DefaultAuthWebhookRetryBackoff (the
// kubelet's), 0.5 s growing 1.5 times with 20% jitter, 5 tries.
func webhookBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// Server is a running kubelet API. Close stops it.
type Server struct {
	cfg   Config
	authn authenticator.Request
	authz authorizer.Authorizer
	srv   *http.Server
	ln    net.Listener
	wg    sync.WaitGroup
	done  chan struct{} // closed by Close: ends following log readers
	once  sync.Once

	mu       sync.Mutex
	closing  bool           // Close began: no new session
	sessions sync.WaitGroup // streaming sessions (session)
}

// Start listens on cfg.Addr and serves until Close. It fails when a field
// is missing, the address is not one loopback allows or is taken.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.NodeName == "" || !cfg.Addr.IsValid() || cfg.CA == nil || cfg.Client == nil || cfg.Node == nil {
		return nil, errors.New("kubeletapi: NodeName, Addr, CA, Client and Node are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	serving, err := cfg.CA.IssueTLS(pki.Leaf{CommonName: cfg.NodeName, IPs: []netip.Addr{cfg.Addr.Addr()}})
	if err != nil {
		return nil, fmt.Errorf("kubeletapi: serving certificate: %w", err)
	}
	clientCA, err := dynamiccertificates.NewStaticCAContent("cluster-ca", cfg.CA.CertPEM())
	if err != nil {
		return nil, fmt.Errorf("kubeletapi: client CA: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          nil, // anonymous requests are refused (401)
		TokenAccessReviewClient:            cfg.Client.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		WebhookRetryBackoff:                webhookBackoff(),
		CacheTTL:                           tokenCacheTTL,
		ClientCertificateCAContentProvider: clientCA,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("kubeletapi: authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cfg.Client.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       webhookBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("kubeletapi: authorization: %w", err)
	}
	ln, err := loopback.Listen(ctx, cfg.Addr.String())
	if err != nil {
		return nil, fmt.Errorf("kubeletapi: %w", err)
	}
	s := &Server{cfg: cfg, authn: authn, authz: authz, ln: ln, done: make(chan struct{})}
	s.srv = &http.Server{
		Handler:           s.filter(s.routes()),
		ReadHeaderTimeout: readHeaderTimeout,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{serving},
			// A client certificate is asked for, not required: a bearer
			// token authenticates too. It is verified against the CA.
			ClientAuth: tls.VerifyClientCertIfGiven,
			ClientCAs:  cfg.CA.Pool(),
			// HTTP/1.1 only: SPDY and WebSocket upgrades need it.
			NextProtos: []string{"http/1.1"},
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Warn("kubeletapi: serve", "err", err)
		}
	}()
	return s, nil
}

// Addr is the address the API listens on.
func (s *Server) Addr() netip.AddrPort { return loopback.AddrPort(s.ln.Addr()) }

// Close stops the API: the listener, every connection (port forwards and
// followed logs included) and the goroutines serving them.
func (s *Server) Close() error {
	s.once.Do(func() { close(s.done) })
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	err := s.srv.Close()
	s.sessions.Wait()
	s.wg.Wait()
	return err
}

// filter authenticates and authorizes every request as the kubelet's auth
// filter does (InstallAuthFilter): 401 without credentials the API server
// accepts, 403 when no subresource the request maps to is allowed, 500
// when the API server cannot be asked.
func (s *Server) filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok, err := s.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				s.cfg.Logger.Info("kubeletapi: unauthenticated", "path", r.URL.Path, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := attributes(s.cfg.NodeName, info.User, r)
		var subresources []string
		for _, a := range attrs {
			subresources = append(subresources, a.Subresource)
			decision, _, err := s.authz.Authorize(r.Context(), a)
			if err != nil {
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)", a.User.GetName(), a.Verb, a.Subresource), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		s.cfg.Logger.Info("kubeletapi: forbidden", "user", info.User.GetName(), "path", r.URL.Path)
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=%v)", info.User.GetName(), attrs[0].Verb, subresources), http.StatusForbidden)
	})
}
