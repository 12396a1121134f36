package control

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
)

// TestMain closes the shared lab before checking for leaks.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.lab != nil {
		shared.lab.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared is the lab of the tests that need one, started by sharedLab.
var shared struct {
	once sync.Once
	lab  *lab.Lab
	err  error
}

// sharedLab returns a lab with Deployment shop/pricing (one ready pod),
// started once for the package's tests; TestMain closes it. Tests must
// leave it as they found it.
func sharedLab(t testing.TB) *lab.Lab {
	t.Helper()
	shared.once.Do(func() { shared.lab, shared.err = startLab(pricing()) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.lab
}

// startLab starts a lab with objs applied and ready.
func startLab(objs []runtime.Object) (*lab.Lab, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := lab.Start(ctx, lab.Config{})
	if err != nil {
		return nil, err
	}
	if err = l.Apply(ctx, objs); err == nil {
		err = l.WaitReady(ctx)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// pricing is Namespace shop and Deployment pricing with one replica.
func pricing() []runtime.Object {
	one := int32(1)
	lbl := map[string]string{"app": "pricing"}
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pricing", Image: "pinlab", Args: []string{"pod", "pricing"},
						Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}}}}}},
			},
		},
	}
}

// listen serves the API on a free port with a new token, written to a
// token file, until the test ends; cfg.Addr and cfg.Token are set here.
func listen(t *testing.T, cfg Config) (srv *Server, tokenFile string) {
	t.Helper()
	cfg.Addr, cfg.Token = "127.0.0.1:0", NewToken()
	srv, err := Listen(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := WriteToken(tokenFile, cfg.Token, true); err != nil {
		t.Fatal(err)
	}
	return srv, tokenFile
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// rawServer accepts connections and writes reply (maybe nothing) before
// closing each, until the test ends.
func rawServer(t *testing.T, reply string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, reply)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestClientErrors: the client says what it found at the address.
func TestClientErrors(t *testing.T) {
	starting, tokenFile := listen(t, Config{})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(web.Close)
	html := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(html.Close)

	tests := []struct {
		name string
		addr string
		want string
	}{
		{name: "nothing listens", addr: closedAddr(t), want: "no lab answers at"},
		{name: "an HTTP server with an empty 200", addr: strings.TrimPrefix(web.URL, "http://"), want: "not a pinlab lab control endpoint"},
		{name: "an HTTP server with 404", addr: strings.TrimPrefix(html.URL, "http://"), want: "answers HTTP (404 Not Found) but is not a pinlab lab control endpoint"},
		{name: "a server that closes at once", addr: rawServer(t, ""), want: "is not a pinlab lab control endpoint"},
		{name: "a server that speaks another protocol", addr: rawServer(t, "SSH-2.0-OpenSSH\r\n"), want: "is not a pinlab lab control endpoint"},
		{name: "a lab still starting", addr: starting.Addr(), want: "the lab is still starting"},
		{name: "not loopback", addr: "192.0.2.1:7471", want: "pinlab only uses 127.0.0.0/8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := (&Client{Addr: tt.addr, TokenFile: tokenFile}).Info(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Info = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestScaleBeyondTheLab: a scale that would take the lab's workloads past
// the pods a lab runs is refused with 409, before any pod starts (issue
// 15's tester: workloads of 5000 pods in all were accepted and never came
// up); one within the bound is done.
func TestScaleBeyondTheLab(t *testing.T) {
	objs := pricing()
	other := objs[1].DeepCopyObject().(*appsv1.Deployment)
	other.Name = "other"
	l, err := startLab(append(objs, other))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv, tokenFile := listen(t, Config{})
	srv.Serve(l)
	c := &Client{Addr: srv.Addr(), TokenFile: tokenFile}
	ctx := labtest.Context(t, 30*time.Second)
	err = c.Scale(ctx, ScaleRequest{Kind: "Deployment", Namespace: "shop", Name: "other", Replicas: new(int32(MaxReplicas))})
	if err == nil || !strings.Contains(err.Error(), "the lab would run 1001 pods, more than the 1000 it runs") {
		t.Errorf("scale to %d beside 1 pod: %v, want a refusal", MaxReplicas, err)
	}
	if err := c.Scale(ctx, ScaleRequest{Kind: "Deployment", Namespace: "shop", Name: "other", Replicas: new(int32(2))}); err != nil {
		t.Errorf("scale to 2: %v", err)
	}
}
