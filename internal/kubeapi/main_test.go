package kubeapi

import (
	"testing"

	"github.com/pinlab/pinlab/internal/cluster"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// embedded returns a Client on a new embedded API (internal/cluster, with
// the API server's defaulting, validation and namespace checks, and no
// controllers), its informers started and synced until the test ends, and
// that API.
func embedded(t *testing.T) (Client, *cluster.Cluster) {
	t.Helper()
	c, err := cluster.New(cluster.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k := Client{Clientset: c.Client(), Factory: c.Factory()}
	k.AddInformers()
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		k.Factory.Shutdown()
	})
	k.Factory.Start(stop)
	for typ, ok := range k.Factory.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	return k, c
}
