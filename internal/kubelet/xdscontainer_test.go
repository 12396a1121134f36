package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/xds"
)

// xdsPod makes p a pod of the image's xDS control plane as deploy/xds
// writes it: args xds serve on every address, port 18000, a grpc
// readiness probe there (every second; the manifest's is every 2 s),
// service account pinlab-xds.
func xdsPod(p *corev1.Pod) {
	p.Spec.ServiceAccountName = "pinlab-xds"
	c := &p.Spec.Containers[0]
	c.Args = []string{"xds", "serve", "--listen", "0.0.0.0:18000"}
	c.Ports = []corev1.ContainerPort{{Name: "xds", ContainerPort: 18000}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 18000}}, PeriodSeconds: 1}
}

// fakeXDS is a Config.XDSServer that does what the control plane does
// with what the node gives it: it listens on its --listen address
// (":18000" without one), makes one request with its credentials, and
// then serves gRPC health there until stopped.
type fakeXDS struct {
	mu     sync.Mutex
	listen string // the listener's address
	err    error  // its request's
}

func (f *fakeXDS) run(ctx context.Context, c XDSContainer) int {
	addr := ":18000"
	if i := slices.Index(c.Args, "--listen"); i >= 0 && i+1 < len(c.Args) {
		addr = c.Args[i+1]
	}
	ln, err := c.Listen(ctx, addr)
	if err != nil {
		fmt.Fprintln(c.Stderr, err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(c.REST)
	if err == nil {
		_, err = cs.Discovery().ServerVersion()
	}
	f.mu.Lock()
	f.listen, f.err = ln.Addr().String(), err
	f.mu.Unlock()
	// Serving health only now, a Ready pod means f is set.
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()
	<-ctx.Done()
	return 0
}

// versionAPI is an API server that answers /version and records each
// request's Authorization header.
type versionAPI struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newVersionAPI(t *testing.T) *versionAPI {
	a := &versionAPI{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.auth = append(a.auth, r.Header.Get("Authorization"))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.0"}`)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *versionAPI) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.auth)
}

// TestXDSContainer: a container of the image's xDS control plane runs on
// the node listening on its pod IP (":18000" and "0.0.0.0:18000" mean
// the pod's addresses; another host is refused where pods share the
// node's namespace), passes its grpc readiness probe there, and calls the
// API server with a token the node requested for its pod's service
// account; deleting the pod stops it. Without credentials (the pod or its
// service account opts out, the service account does not exist, the node
// has no API server to give) the image's command exits 1 saying why.
func TestXDSContainer(t *testing.T) {
	api := newVersionAPI(t)
	no := false
	for _, tt := range []struct{ name, listen string }{{"every address", "0.0.0.0:18000"}, {"the image's default", ""}} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeXDS{}
			c, _, stop := node(t, Config{XDSServer: f.run, APIServer: &rest.Config{Host: api.URL, BearerToken: "the-node's-own"}})
			defer stop()
			ctx := context.Background()
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "pinlab-xds", Namespace: "default"}}
			if _, err := c.Client().CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			before := len(api.seen())
			createPod(t, c, "pinlab-xds-0", func(p *corev1.Pod) {
				xdsPod(p)
				if tt.listen == "" {
					p.Spec.Containers[0].Args = []string{"xds", "serve"}
				}
			})
			p := waitPod(t, c, "pinlab-xds-0", "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
			f.mu.Lock()
			listen, reqErr := f.listen, f.err
			f.mu.Unlock()
			if want := net.JoinHostPort(p.Status.PodIP, "18000"); listen != want || reqErr != nil {
				t.Errorf("listened on %s (want %s); request: %v", listen, want, reqErr)
			}
			got := api.seen()[before:]
			if len(got) != 1 || !strings.HasPrefix(got[0], "Bearer ") || len(got[0]) < len("Bearer ")+32 || strings.Contains(got[0], "node's-own") {
				t.Errorf("the API server saw Authorization %q, want one service-account bearer token", got)
			}
			deletePod(t, c, "pinlab-xds-0")
			waitGone(t, c, "pinlab-xds-0")
		})
	}

	t.Run("exits", func(t *testing.T) {
		// The image's own command, as the lab runs it (labup).
		real := func(ctx context.Context, c XDSContainer) int {
			return xds.Main(ctx, c.Args, xds.Host{REST: c.REST, NoREST: c.NoREST, Listen: c.Listen, NoFiles: true, Stdout: c.Stdout, Stderr: c.Stderr})
		}
		withAPI := Config{XDSServer: real, APIServer: &rest.Config{Host: api.URL}}
		tests := []struct {
			name string
			cfg  Config
			sa   *bool // the service account's automountServiceAccountToken
			mod  func(*corev1.Pod)
			code int32
			want string
		}{
			{name: "the pod opts out", cfg: withAPI, mod: func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = &no }, code: 1, want: "automountServiceAccountToken is false"},
			{name: "its service account opts out", cfg: withAPI, sa: &no, code: 1, want: "automountServiceAccountToken is false (on the pod or its service account pinlab-xds)"},
			{name: "no service account", cfg: withAPI, mod: func(p *corev1.Pod) { p.Spec.ServiceAccountName = "nobody" }, code: 1, want: `service account default/nobody: serviceaccounts "nobody" not found`},
			{name: "the node has none", cfg: Config{XDSServer: real}, code: 1, want: "gives pods no service-account credentials"},
			{name: "the node runs none", cfg: Config{}, code: 1, want: "runs no xDS control planes"},
			{name: "the node's loopback", cfg: withAPI, mod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Args = []string{"xds", "serve", "--listen", "127.0.0.1:18000"}
			},
				code: 1, want: "listen 127.0.0.1:18000: want the pod IP"},
			{name: "a file on the node", cfg: withAPI, mod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Args = []string{"xds", "serve", "--bootstrap", "/tmp/boot.json"}
			},
				code: 2, want: "--bootstrap /tmp/boot.json: this node runs the container without a filesystem"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c, _, stop := node(t, tt.cfg)
				defer stop()
				sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "pinlab-xds", Namespace: "default"}, AutomountServiceAccountToken: tt.sa}
				if _, err := c.Client().CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				createPod(t, c, "pinlab-xds-0", func(p *corev1.Pod) {
					xdsPod(p)
					if tt.mod != nil {
						tt.mod(p)
					}
				})
				p := waitPod(t, c, "pinlab-xds-0", "an exit", func(p *corev1.Pod, err error) bool {
					return err == nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
				})
				term := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
				if term.ExitCode != tt.code || !strings.Contains(term.Message, tt.want) {
					t.Errorf("exit %d %q, want %d saying %q", term.ExitCode, term.Message, tt.code, tt.want)
				}
			})
		}
	})
}

// TestServiceAccountToken: the node asks TokenRequest for a token of the
// pod's service account bound to the pod, renews it 20 % of its asked
// length before the reported expiry, asks again after a 401, and refuses
// an answer without a token or already due.
func TestServiceAccountToken(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pinlab-xds-0", Namespace: "default", UID: "uid-1"}, Spec: corev1.PodSpec{ServiceAccountName: "pinlab-xds"}}
	cs := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "pinlab-xds", Namespace: "default"}})
	var mu sync.Mutex
	var asked []*authenticationv1.TokenRequest
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateActionImpl)
		if a.GetSubresource() != "token" || ca.Name != "pinlab-xds" {
			return false, nil, nil
		}
		tr := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		mu.Lock()
		asked = append(asked, tr)
		n := len(asked)
		mu.Unlock()
		tr.Status = authenticationv1.TokenRequestStatus{Token: fmt.Sprintf("token-%d-%s", n, strings.Repeat("x", 32)),
			ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))}
		return true, tr, nil
	})
	// The API refuses the first token once, as after a key rotation.
	var auth []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer token-1-") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37"}`)
	}))
	defer api.Close()
	rc, err := inClusterConfig(t.Context(), cs, &rest.Config{Host: api.URL, Username: "admin", Password: "never-sent"}, p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	c.Discovery().ServerVersion() // 401
	if _, err := c.Discovery().ServerVersion(); err != nil {
		t.Errorf("after a 401, with a new token: %v", err)
	}
	mu.Lock()
	if len(asked) != 2 || len(auth) != 2 || !strings.HasPrefix(auth[1], "Bearer token-2-") {
		t.Errorf("%d token requests, API saw %q; want 2, the second token used after the 401", len(asked), auth)
	}
	for _, tr := range asked {
		if r := tr.Spec.BoundObjectRef; r == nil || r.Kind != "Pod" || r.Name != p.Name || r.UID != p.UID || *tr.Spec.ExpirationSeconds != 3607 {
			t.Errorf("token request %+v: want 3607 s bound to pod %s (%s)", tr.Spec, p.Name, p.UID)
		}
	}
	mu.Unlock()

	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	secs := int64(3607)
	answer := func(tok string, exp time.Duration) *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
			Status: authenticationv1.TokenRequestStatus{Token: tok, ExpirationTimestamp: metav1.NewTime(now.Add(exp))}}
	}
	for _, tt := range []struct {
		name  string
		tr    *authenticationv1.TokenRequest
		renew time.Duration // after now; 0: an error
	}{
		{"an hour", answer("t", 3607*time.Second), 3607*time.Second - 721*time.Second},
		{"no token", answer("", time.Hour), 0},
		{"due already", answer("t", 10*time.Minute), 0},
	} {
		got, err := renewal(tt.tr, now)
		switch {
		case tt.renew == 0 && err == nil:
			t.Errorf("%s: %v, want an error", tt.name, got.Expiry)
		case tt.renew != 0 && (err != nil || !got.Expiry.Equal(now.Add(tt.renew))):
			t.Errorf("%s: %v %v, want renewal at +%v", tt.name, got, err, tt.renew)
		case err != nil && strings.Contains(err.Error(), "t\""):
			t.Errorf("%s: the error shows the token: %v", tt.name, err)
		}
	}
}
