package kubetier

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/cli"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	grpcxds "google.golang.org/grpc/xds"
)

// TestXDSServe: `pinlab xds serve` on the real control plane tier, with
// the kubeconfig a user has, and a grpc-go client in the tier's network
// namespace (the lab's load client with grpc-go's xDS resolver, given the
// bootstrap the command writes): the client's calls reach every ready
// pod of the Service, and a pod the Deployment adds within seconds. When
// its context ends (Ctrl-C), the command returns and removes the
// bootstrap.
func TestXDSServe(t *testing.T) {
	const ns = "xds-serve"
	ctx := setUp(t, ns, 2)
	boot := filepath.Join(t.TempDir(), "bootstrap.json")
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		root := cli.NewRootCmd(out, io.Discard)
		root.SetArgs([]string{"xds", "serve", "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:0", "--bootstrap", boot, "-n", ns})
		done <- root.ExecuteContext(sctx)
	}()
	labtest.WaitFor(t, 30*time.Second, "the bootstrap file", func() bool { _, err := os.Stat(boot); return err == nil })
	raw, err := os.ReadFile(boot)
	if err != nil {
		t.Fatal(err)
	}
	r, err := grpcxds.NewXDSResolverWithConfigForTesting(raw)
	if err != nil {
		t.Fatalf("grpc-go takes the bootstrap %s: %v", raw, err)
	}
	source, err := clientIP()
	if err != nil {
		t.Fatal(err)
	}
	calls := &podCalls{}
	c, err := load.New(load.Config{Name: "order-0", Source: source, Resolver: load.ResolverXDS, XDS: r,
		Target: "xds:///pricing." + ns + ":8471", Rate: 50, Observer: calls})
	if err != nil {
		t.Fatal(err)
	}
	stopLoad := labtest.Run(t, c.Run)
	defer stopLoad()
	labtest.WaitFor(t, 30*time.Second, "calls on both pods", func() bool { return len(calls.pods()) == 2 })
	if err := theLab.Scale(ctx, "Deployment", ns, "pricing", 3); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 60*time.Second, "calls on the added pod", func() bool { return len(calls.pods()) == 3 })
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("xds serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("xds serve did not return within 30 s of its context's end")
	}
	if _, err := os.Stat(boot); !os.IsNotExist(err) {
		t.Errorf("the bootstrap file is still there: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "serving xDS on 127.0.0.1:") || !strings.Contains(s, "namespace "+ns) {
		t.Errorf("xds serve said:\n%s", s)
	}
}
