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
// addresses without reporting an error first, follows a change, and
// reports a 403; on an API server with the WatchList feature (client-go
// then gets the slices from one watch) and on one without (client-go's
// watch-list request fails with 422 and it falls back to a list).
func TestKubeconfig(t *testing.T) {
	for _, tt := range []struct {
		name      string
		watchList bool
	}{
		{name: "API with WatchList", watchList: true},
		{name: "API without WatchList", watchList: false},
	} {
		t.Run(tt.name, func(t *testing.T) { testKubeconfig(t, tt.watchList) })
	}
}

func testKubeconfig(t *testing.T, watchList bool) {
	e := newEnv(t)
	e.srv.SetWatchList(watchList)
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
	lists := 0
	for _, r := range e.srv.Requests() {
		if !r.Watch {
			lists++
		}
	}
	if want := map[bool]int{true: 0, false: 1}[watchList]; lists != want {
		t.Errorf("%d lists, want %d; requests: %+v", lists, want, e.srv.Requests())
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
