package kubeletapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pki"
	"github.com/pinlab/pinlab/internal/podlog"
	"github.com/pinlab/pinlab/internal/podshell"
)

// TestMain checks for leaked goroutines but three of libraries': klog's
// flush daemon; spdystream's shutdown of a connection closed with an
// error, which waits up to a second for someone to read that error; and
// client-go's port forwarder (the test's client), whose connection handler
// stays blocked on its error channel when its session is stopped after a
// refused connection.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("github.com/moby/spdystream.(*Connection).shutdown"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/portforward.(*PortForwarder).handleConnection.func1"))
}

// fakeNode runs one pod, shop/pricing-0, whose address is 127.0.0.1.
type fakeNode struct {
	mu   sync.Mutex
	pod  *corev1.Pod
	cur  *podlog.Log
	prev *podlog.Log
	eph  *podlog.Log
}

func (n *fakeNode) Pod(ns, name string) (*corev1.Pod, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pod == nil || n.pod.Namespace != ns || n.pod.Name != name {
		return nil, false
	}
	return n.pod, true
}

func (n *fakeNode) Pods() []*corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pod == nil {
		return nil
	}
	return []*corev1.Pod{n.pod}
}

func (n *fakeNode) EphemeralLog(ns, name, container string) (*podlog.Log, error) {
	if _, ok := n.Pod(ns, name); !ok || n.eph == nil {
		return nil, errors.New("no such log")
	}
	return n.eph, nil
}

func (n *fakeNode) Logs(ns, name string, previous bool) (*podlog.Log, error) {
	if _, ok := n.Pod(ns, name); !ok {
		return nil, errors.New("no such pod")
	}
	if previous {
		if n.prev == nil {
			return nil, errors.New("no previous terminated container")
		}
		return n.prev, nil
	}
	return n.cur, nil
}

func (n *fakeNode) Shell(ns, name, container string) (podshell.Pod, error) {
	p, ok := n.Pod(ns, name)
	if !ok {
		return podshell.Pod{}, errors.New("no such pod")
	}
	return podshell.Pod{Pod: p, Container: container, ResolvConf: "nameserver 10.96.0.10\n"}, nil
}

// The API server's users, as the fake TokenReview and SubjectAccessReview
// answer for them.
const (
	aliceToken = "alice-token" // may do anything on the node
	bobToken   = "bob-token"   // may read pods only
)

// fakeAPIServer answers TokenReviews for aliceToken and bobToken and
// SubjectAccessReviews as their rights say (the API server's client
// certificate user, in system:masters, may do anything), over HTTP as the
// API server does: the delegating authenticator and authorizer post them
// with the client's REST client. It returns a client of it.
func fakeAPIServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch tr.Spec.Token {
		case aliceToken:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}
		case bobToken:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "bob"}}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&tr)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ra := sar.Spec.ResourceAttributes
		allowed := sar.Spec.User == "alice" || slices.Contains(sar.Spec.Groups, "system:masters") ||
			sar.Spec.User == "bob" && ra != nil && ra.Resource == "nodes" && ra.Subresource == "pods" && ra.Name == "node-a"
		sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&sar)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs a Server for a fakeNode on 127.0.0.1 and returns it, the node
// and the CA.
func start(t *testing.T) (*Server, *fakeNode, *pki.CA) {
	t.Helper()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	node := &fakeNode{cur: podlog.New(), pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pricing-0", UID: "uid-1"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "pricing"}}},
		Status: corev1.PodStatus{PodIP: "127.0.0.1"}}}
	s, err := Start(context.Background(), Config{NodeName: "node-a", Addr: netip.MustParseAddrPort("127.0.0.1:0"), CA: ca,
		Client: fakeAPIServer(t), Node: node, Logger: labtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, node, ca
}

// get requests path with the token (or client certificate) given and
// returns the status and body.
func get(t *testing.T, s *Server, ca *pki.CA, path, token string, cert *tls.Certificate) (int, string) {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+s.Addr().String()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAuth: anonymous and unknown callers get 401, a caller without the
// right on the node's subresource 403; /pods is allowed by nodes/pods, the
// rest by nodes/proxy; a client certificate of the cluster CA
// authenticates, one of another CA gets no TLS session.
func TestAuth(t *testing.T) {
	s, node, ca := start(t)
	node.cur.Printf("hello")
	apiserver, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := pki.NewCA("other")
	stranger, err := other.IssueTLS(pki.Leaf{CommonName: "x", Organization: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, token string
		cert              *tls.Certificate
		want              int
		body              string
	}{
		{name: "anonymous", path: "/pods", want: 401},
		{name: "an unknown token", path: "/healthz", token: "nope", want: 401},
		{name: "alice's healthz", path: "/healthz", token: aliceToken, want: 200, body: "ok"},
		{name: "alice's pods", path: "/pods", token: aliceToken, want: 200, body: `"name":"pricing-0"`},
		{name: "bob's pods (nodes/pods)", path: "/pods", token: bobToken, want: 200, body: `"kind":"PodList"`},
		{name: "bob's logs (nodes/proxy)", path: "/containerLogs/shop/pricing-0/pricing", token: bobToken, want: 403, body: "subresource(s)=[proxy]"},
		{name: "bob's healthz (nodes/healthz, proxy)", path: "/healthz", token: bobToken, want: 403, body: "[healthz proxy]"},
		{name: "the API server's certificate", path: "/containerLogs/shop/pricing-0/pricing", cert: &apiserver, want: 200, body: "hello\n"},
		// A TLS client offers only a certificate of a CA the server names
		// (Go's, kubectl's): this one goes unsent, and the call is anonymous.
		{name: "another CA's certificate", path: "/pods", cert: &stranger, want: 401},
		{name: "exec without a stream", path: "/exec/shop/pricing-0/pricing?command=ls", token: aliceToken, want: 400},
		{name: "run is not served", path: "/run/shop/pricing-0/pricing?cmd=ls", token: aliceToken, want: 404},
		{name: "exec by bob", path: "/exec/shop/pricing-0/pricing?command=ls&output=1", token: bobToken, want: 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, body := get(t, s, ca, tt.path, tt.token, tt.cert)
			if got != tt.want || !strings.Contains(body, tt.body) {
				t.Errorf("GET %s: %d %q, want %d with %q", tt.path, got, body, tt.want, tt.body)
			}
		})
	}
}

// TestLogs: containerLogs' options as the API server's pods/log passes
// them, bad ones refused with what was expected; follow streams new lines
// and ends when the container does.
func TestLogs(t *testing.T) {
	s, node, ca := start(t)
	prev := podlog.New()
	prev.Printf("old run")
	prev.Close()
	node.prev = prev
	for i := range 5 {
		node.cur.Printf("line %d", i)
	}
	base := "/containerLogs/shop/pricing-0/pricing"
	node.mu.Lock()
	node.pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "pinlab-agent", Image: "pinlab-agent:v1"}}}
	node.eph = podlog.New()
	node.eph.Printf(`{"v":1}`)
	node.mu.Unlock()
	tests := []struct {
		name, query string
		want        int
		body        string // the whole body for 200, else a part
	}{
		{name: "all", want: 200, body: "line 0\nline 1\nline 2\nline 3\nline 4\n"},
		{name: "tail", query: "tailLines=2", want: 200, body: "line 3\nline 4\n"},
		{name: "tail 0", query: "tailLines=0", want: 200, body: ""},
		{name: "limit", query: "limitBytes=10", want: 200, body: "line 0\nlin"},
		{name: "previous", query: "previous=true", want: 200, body: "old run\n"},
		{name: "since, all recent", query: "sinceSeconds=60", want: 200, body: "line 0\nline 1\nline 2\nline 3\nline 4\n"},
		{name: "since the future", query: "sinceTime=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), want: 200, body: ""},
		{name: "a negative tail", query: "tailLines=-1", want: 422, body: "tailLines: \"-1\" is not an integer of at least 0"},
		{name: "both since", query: "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z", want: 422, body: "at most one"},
		{name: "follow not a bool", query: "follow=maybe", want: 422, body: "follow"},
		{name: "another container", want: 404, body: "container \"other\" not found"},
		{name: "the agent's", want: 200, body: "{\"v\":1}\n"},
		{name: "the agent's previous", query: "previous=true", want: 400, body: "previous terminated container \"pinlab-agent\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := base + "?" + tt.query
			switch tt.name {
			case "another container":
				path = "/containerLogs/shop/pricing-0/other"
			case "the agent's", "the agent's previous":
				path = "/containerLogs/shop/pricing-0/pinlab-agent?" + tt.query
			}
			got, body := get(t, s, ca, path, aliceToken, nil)
			if got != tt.want || (tt.want == 200 && body != tt.body) || (tt.want != 200 && !strings.Contains(body, tt.body)) {
				t.Errorf("GET %s: %d %q, want %d %q", path, got, body, tt.want, tt.body)
			}
		})
	}
	if got, body := get(t, s, ca, base+"?timestamps=true&tailLines=1", aliceToken, nil); got != 200 || !strings.HasSuffix(body, "Z line 4\n") || !strings.HasPrefix(body, "20") {
		t.Errorf("timestamps: %d %q, want an RFC 3339 time, a space and the line", got, body)
	}

	// Follow: what comes after the request, until the container ends.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+s.Addr().String()+base+"?follow=true&tailLines=1", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	time.Sleep(100 * time.Millisecond)
	node.cur.Printf("line 5")
	node.cur.Close()
	select {
	case b := <-got:
		if b != "line 4\nline 5\n" {
			t.Errorf("follow: %q, want the last line, the new one, then the end", b)
		}
	case <-time.After(10 * time.Second):
		t.Error("follow did not end with the container")
	}
}

// TestPortForward: client-go's port forwarder (as kubectl port-forward)
// reaches a port of the pod's address over SPDY; a connection to a port
// nothing listens on closes at once; a session ends when its pod is gone.
func TestPortForward(t *testing.T) {
	s, node, ca := start(t)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	echoPort := echo.Addr().(*net.TCPAddr).Port
	forward := func(port int) (local string, errOut *labtest.Buffer, done <-chan error, stop func()) {
		cfg := &rest.Config{Host: "https://" + s.Addr().String(), BearerToken: aliceToken, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM()}}
		rt, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(cfg.Host + "/portForward/shop/pricing-0")
		dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
		stopCh, ready := make(chan struct{}), make(chan struct{})
		errOut = &labtest.Buffer{}
		pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stopCh, ready, io.Discard, errOut)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- pf.ForwardPorts() }()
		select {
		case <-ready:
		case err := <-errc:
			t.Fatalf("port forward: %v (%s)", err, errOut)
		case <-time.After(10 * time.Second):
			t.Fatal("port forward not ready in 10 s")
		}
		ports, err := pf.GetPorts()
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), errOut, errc, func() { once.Do(func() { close(stopCh) }) }
	}
	roundTrip := func(addr, msg string) (string, error) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, msg); err != nil {
			return "", err
		}
		c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		return string(b), err
	}

	{
		local, _, done, stop := forward(echoPort)
		for _, msg := range []string{"hello", "again"} {
			if got, err := roundTrip(local, msg); got != msg || err != nil {
				t.Errorf("echo through the forward: %q, %v; want %q", got, err, msg)
			}
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("ForwardPorts after stop: %v", err)
		}
	}

	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	local, _, done, stop := forward(closedPort)
	if got, _ := roundTrip(local, "x"); got != "" {
		t.Errorf("a port nothing listens on echoed %q", got)
	}
	// The error goes back on the error stream, and the server resets the
	// streams; whether client-go reads the error first, and ends its
	// session as kubectl does, or the reset, is a race in both.
	stop()
	<-done

	_, _, done, stop = forward(echoPort)
	defer stop()
	node.mu.Lock()
	node.pod = nil // deleted
	node.mu.Unlock()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ForwardPorts ended without an error when the pod went")
		}
	case <-time.After(10 * time.Second):
		t.Error("the session outlived its pod by 10 s")
	}
}

// execIn runs command in shop/pricing-0's container through client-go's
// SPDY executor, as kubectl exec does, and returns its output and error.
func execIn(t *testing.T, s *Server, ca *pki.CA, token, path string, stdin string, tty bool) (string, string, error) {
	t.Helper()
	var out bytes.Buffer
	errs, err := stream(t, s, ca, token, path, stdin, tty, &out)
	return out.String(), errs, err
}

// stream is execIn writing the output to out.
func stream(t *testing.T, s *Server, ca *pki.CA, token, path string, stdin string, tty bool, out io.Writer) (string, error) {
	t.Helper()
	cfg := &rest.Config{Host: "https://" + s.Addr().String(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM()}}
	u, _ := url.Parse(cfg.Host + path)
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	var errw bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: out, Tty: tty}
	if !tty {
		opts.Stderr = &errw
	}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, opts)
	return errw.String(), err
}

// TestExec: commands run with their output and exit code, as kubectl exec
// reports them; an unknown command exits 127; an ephemeral container, an
// unknown container or pod are refused; bob (who may read pods only) is
// forbidden.
func TestExec(t *testing.T) {
	s, node, ca := start(t)
	node.mu.Lock()
	node.pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}}}
	node.mu.Unlock()
	q := func(cmd ...string) string {
		v := url.Values{"command": cmd, "output": {"1"}, "error": {"1"}}
		return "?" + v.Encode()
	}
	tests := []struct {
		name, path, token, stdin string
		tty                      bool
		out, errs, err           string
		code                     int
	}{
		{name: "hostname", path: "/exec/shop/pricing-0/pricing" + q("hostname"), out: "pricing-0\n"},
		{name: "with the pod's UID", path: "/exec/shop/pricing-0/uid-1/pricing" + q("cat", "/etc/resolv.conf"), out: "nameserver 10.96.0.10\n"},
		{name: "unknown command", path: "/exec/shop/pricing-0/pricing" + q("curl"), errs: "curl: command not found", code: 127},
		{name: "exit code", path: "/exec/shop/pricing-0/pricing" + q("sh", "-c", "exit 3"), code: 3},
		{name: "stdin", path: "/exec/shop/pricing-0/pricing?command=sh&input=1&output=1&error=1", stdin: "echo one\nhostname\n", out: "one\npricing-0\n"},
		{name: "tty", path: "/exec/shop/pricing-0/pricing?command=sh&input=1&output=1&tty=1", stdin: "echo hi\r", tty: true, out: "$ echo hi\r\nhi\r\n$ "},
		{name: "wrong UID", path: "/exec/shop/pricing-0/uid-2/pricing" + q("hostname"), err: "not found"},
		{name: "unknown container", path: "/exec/shop/pricing-0/sidecar" + q("hostname"), err: "not found"},
		{name: "ephemeral container", path: "/exec/shop/pricing-0/debugger" + q("hostname"), err: "no shell to exec or attach to"},
		{name: "forbidden", path: "/exec/shop/pricing-0/pricing" + q("hostname"), token: bobToken, err: "Forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := tt.token
			if token == "" {
				token = aliceToken
			}
			out, errs, err := execIn(t, s, ca, token, tt.path, tt.stdin, tt.tty)
			var code int
			var exitErr utilexec.ExitError
			switch {
			case errors.As(err, &exitErr):
				code = exitErr.ExitStatus()
			case err != nil && (tt.err == "" || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("exec: %v, want an error saying %q", err, tt.err)
			case err == nil && tt.err != "":
				t.Fatalf("exec succeeded, want an error saying %q", tt.err)
			}
			if code != tt.code || out != tt.out && tt.out != "" || !strings.Contains(errs, tt.errs) {
				t.Errorf("exec: exit %d, out %q, err %q; want %d, %q, %q", code, out, errs, tt.code, tt.out, tt.errs)
			}
		})
	}
}

// TestAttach: attach streams what the container writes after it attached,
// not before, and ends when the container does.
func TestAttach(t *testing.T) {
	s, node, ca := start(t)
	node.cur.Printf("before attaching")
	done := make(chan struct{})
	out := &labtest.Buffer{}
	var err error
	go func() {
		defer close(done)
		_, err = stream(t, s, ca, aliceToken, "/attach/shop/pricing-0/pricing?output=1&error=1", "", false, out)
	}()
	// Until a line arrives, the stream may not be open yet: keep writing.
	for i := 0; out.String() == "" && i < 200; i++ {
		node.cur.Printf("after attaching")
		select {
		case <-done:
			t.Fatalf("attach ended before the container: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	node.cur.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("attach did not end with the container")
	}
	got := out.String()
	if err != nil || !strings.HasPrefix(got, "after attaching\n") || strings.Contains(got, "before") {
		t.Errorf("attach: %q, %v; want only lines written after attaching", got, err)
	}
}

// TestExecEndsWithPod: an interactive exec whose pod is deleted ends with
// exit code 137 and says why, as a runtime ends an exec when its
// container stops.
func TestExecEndsWithPod(t *testing.T) {
	s, node, ca := start(t)
	cfg := &rest.Config{Host: "https://" + s.Addr().String(), BearerToken: aliceToken, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM()}}
	u, _ := url.Parse(cfg.Host + "/exec/shop/pricing-0/pricing?command=sh&input=1&output=1&error=1")
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	in, feed := io.Pipe()
	defer feed.Close()
	out, errw := &labtest.Buffer{}, &labtest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdin: in, Stdout: out, Stderr: errw})
	}()
	io.WriteString(feed, "hostname\n")
	ctx := labtest.Context(t, 10*time.Second)
	if err := labtest.Poll(ctx, 10*time.Millisecond, func() bool { return out.String() == "pricing-0\n" }); err != nil {
		t.Fatalf("the session did not run its first command: %q", out.String())
	}
	node.mu.Lock()
	node.pod = nil // deleted
	node.mu.Unlock()
	select {
	case err := <-done:
		var exitErr utilexec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 137 || !strings.Contains(errw.String(), "is gone") {
			t.Errorf("exec after its pod was deleted: %v, stderr %q; want exit 137 saying the pod is gone", err, errw.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exec outlived its pod by 10 s")
	}
}
