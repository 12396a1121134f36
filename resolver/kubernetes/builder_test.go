package kubernetes

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/resolver"
)

// TestKubeconfig: out of a cluster the Builder connects with a kubeconfig,
// takes its context's namespace for targets without one, and a 403 from a
// real API server (here a stub on loopback) is reported as RBAC's.
func TestKubeconfig(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
			`"message":"endpointslices.discovery.k8s.io is forbidden: User \"alice\" cannot %s resource \"endpointslices\" in API group \"discovery.k8s.io\" in the namespace \"shop\""}`,
			map[bool]string{true: "watch", false: "list"}[r.URL.Query().Get("watch") == "true"])
	}))
	t.Cleanup(api.Close)
	path := writeKubeconfig(t, api.URL)
	u, _ := url.Parse("kubernetes:///pricing:grpc")
	cc := newFakeCC()
	r, err := NewBuilder(WithKubeconfig(path), WithLogger(nil)).Build(resolver.Target{URL: *u}, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	cc.waitError(t, "kubernetes://shop/pricing:grpc: list EndpointSlices", `User "alice" cannot list`, "needs get, list and watch", "no addresses yet")
}

// TestUnreachableAPI: an API server that cannot be reached (connection
// refused) is reported at once, not left to calls that time out (a fresh
// user's kubeconfig pointing at 127.0.0.1:1 saw only DeadlineExceeded for
// 20 s: client-go retries a failed watch-list request without the list
// whose failure used to be the one reported).
func TestUnreachableAPI(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	path := writeKubeconfig(t, "http://"+addr)
	u, _ := url.Parse("kubernetes:///pricing:grpc")
	cc := newFakeCC()
	r, err := NewBuilder(WithKubeconfig(path), WithLogger(nil)).Build(resolver.Target{URL: *u}, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	cc.waitError(t, "kubernetes://shop/pricing:grpc:", "EndpointSlices", "connection refused")
}

// TestNoConfig: a Builder that can find no API fails Build, and says why.
func TestNoConfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	u, _ := url.Parse("kubernetes:///pricing.shop:grpc")
	_, err := NewBuilder(WithLogger(nil)).Build(resolver.Target{URL: *u}, newFakeCC(), resolver.BuildOptions{})
	if err == nil {
		t.Fatal("Build succeeded without a cluster or a kubeconfig")
	}
	t.Logf("error: %v", err)
}

// writeKubeconfig writes a kubeconfig whose current context is user alice
// (a bearer token) in namespace shop on the API server at url, and returns
// its path.
func writeKubeconfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: %q}
users:
- name: alice
  user: {token: secret}
contexts:
- name: lab
  context: {cluster: lab, user: alice, namespace: shop}
current-context: lab
`, url)
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
