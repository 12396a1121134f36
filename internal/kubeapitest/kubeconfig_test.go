package kubeapitest_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	ours "github.com/pinlab/pinlab/resolver/kubernetes"
	"google.golang.org/grpc/resolver"
)

// TestKubeconfig: out of a cluster, resolver/kubernetes reaches the API
// over HTTP with a kubeconfig (kuberesolver's issue #60), takes the
// context's namespace for a target without one, gets the Service's
// addresses without reporting an error first (client-go first tries a
// watch-list, which this API refuses as one without the WatchList feature
// does, and falls back to a list), follows a change, and reports a 403.
func TestKubeconfig(t *testing.T) {
	e := newEnv(t)
	s := slice("pricing-a", ips(0, 2)...)
	e.create(t, s)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: %q}
users:
- name: order
  user: {token: not-checked}
contexts:
- name: lab
  context: {cluster: lab, user: order, namespace: shop}
current-context: lab
`, e.srv.URL)
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse("kubernetes:///pricing:grpc")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ours.NewBuilder(ours.WithKubeconfig(path), ours.WithLogger(nil)).Build(resolver.Target{URL: *u}, e.ours, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	e.ours.mustAddrs(t, ips(0, 2))
	if reported(e.ours.snapshot(), "") {
		t.Errorf("an error before the first addresses:\n%s", e.ours.describe())
	}
	if n := len(e.srv.Requests()); n < 2 {
		t.Errorf("%d requests to the API, want a list and a watch at least", n)
	}

	c := s.DeepCopy()
	c.Endpoints = append(c.Endpoints, endpoint(ips(2, 1)[0], true))
	e.update(t, c)
	e.ours.mustAddrs(t, ips(0, 3))

	e.forbid.Store(true)
	e.stopWatches() // the server's relay ends, client-go watches again: 403
	if !e.ours.wait(func(evs []event) bool {
		return reported(evs, "forbidden") && reported(evs, "needs get, list and watch")
	}) {
		t.Errorf("no 403 reported:\n%s", e.ours.describe())
	}
}
