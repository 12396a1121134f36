package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pinlab/pinlab/internal/xds"
)

// xdsPod makes p a pod of the image's xDS control plane as deploy/xds
// writes it: args xds serve on every address, port 18000, a grpc
// readiness probe there, service account pinlab-xds.
func xdsPod(p *corev1.Pod) {
	p.Spec.ServiceAccountName = "pinlab-xds"
	c := &p.Spec.Containers[0]
	c.Args = []string{"xds", "serve", "--listen", "0.0.0.0:18000"}
	c.Ports = []corev1.ContainerPort{{Name: "xds", ContainerPort: 18000}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 18000}}}
}

// fakeXDS is a Config.XDSServer that does what the control plane does
// with what the node gives it: it listens where told, serves gRPC health
// there, and makes one request with its credentials, until stopped.
type fakeXDS struct {
	mu     sync.Mutex
	listen string // the listener's address
	err    error  // its request's
}

func (f *fakeXDS) run(ctx context.Context, c XDSContainer) int {
	ln, err := c.Listen(ctx, "0.0.0.0:18000")
	if err != nil {
		fmt.Fprintln(c.Stderr, err)
		return 1
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()
	cs, err := kubernetes.NewForConfig(c.REST)
	if err == nil {
		_, err = cs.Discovery().ServerVersion()
	}
	f.mu.Lock()
	f.listen, f.err = ln.Addr().String(), err
	f.mu.Unlock()
	<-ctx.Done()
	return 0
}

// TestXDSContainer: a container of the image's xDS control plane runs on
// the node listening on its pod IP (":18000" and "0.0.0.0:18000" mean
// the pod's addresses), passes its grpc readiness probe there, and calls
// the API server with a token the node requested for its pod's service
// account; deleting the pod stops it. Without credentials (the pod opts
// out, its service account does not exist, the node has no API server
// to give) the image's command exits 1 saying why.
func TestXDSContainer(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.0"}`)
	}))
	defer api.Close()
	f := &fakeXDS{}
	c, _, stop := node(t, Config{XDSServer: f.run, APIServer: &rest.Config{Host: api.URL, BearerToken: "the-node's-own"}})
	defer stop()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "pinlab-xds", Namespace: "default"}}
	if _, err := c.Client().CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := readyPod(t, c, "pinlab-xds-0", xdsPod)
	f.mu.Lock()
	listen, reqErr := f.listen, f.err
	f.mu.Unlock()
	if want := net.JoinHostPort(p.Status.PodIP, "18000"); listen != want || reqErr != nil {
		t.Errorf("listened on %s (want %s); request: %v", listen, want, reqErr)
	}
	mu.Lock()
	got := append([]string(nil), auth...)
	mu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "Bearer ") || len(got[0]) < len("Bearer ")+32 || strings.Contains(got[0], "node's-own") {
		t.Errorf("the API server saw Authorization %q, want one service-account bearer token", got)
	}
	deletePod(t, c, "pinlab-xds-0")
	waitGone(t, c, "pinlab-xds-0")

	t.Run("no credentials", func(t *testing.T) {
		// The image's own command, as the lab runs it (labup).
		real := func(ctx context.Context, c XDSContainer) int {
			return xds.Main(ctx, c.Args, xds.Host{REST: c.REST, NoREST: c.NoREST, Listen: c.Listen, Stdout: c.Stdout, Stderr: c.Stderr})
		}
		no := false
		tests := []struct {
			name string
			cfg  Config
			mod  func(*corev1.Pod)
			want string
		}{
			{name: "opted out", cfg: Config{XDSServer: real, APIServer: &rest.Config{Host: api.URL}},
				mod: func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = &no }, want: "automountServiceAccountToken: false"},
			{name: "no service account", cfg: Config{XDSServer: real, APIServer: &rest.Config{Host: api.URL}},
				mod: func(p *corev1.Pod) { p.Spec.ServiceAccountName = "nobody" }, want: `service account default/nobody: serviceaccounts "nobody" not found`},
			{name: "the node has none", cfg: Config{XDSServer: real}, want: "gives pods no service-account credentials"},
			{name: "the node runs none", cfg: Config{}, want: "runs no xDS control planes"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c, _, stop := node(t, tt.cfg)
				defer stop()
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
				if term.ExitCode != 1 || !strings.Contains(term.Message, tt.want) {
					t.Errorf("exit %d %q, want 1 saying %q", term.ExitCode, term.Message, tt.want)
				}
			})
		}
	})
}
