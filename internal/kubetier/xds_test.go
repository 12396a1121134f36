package kubetier

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/cli"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/xds"
	grpcxds "google.golang.org/grpc/xds"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	followScaleOut(t, ctx, ns, raw)
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

// followScaleOut runs a grpc-go client with the xDS bootstrap raw in the
// tier's network namespace (the lab's load client with grpc-go's xDS
// resolver) against xds:///pricing.NS:8471, whose Deployment has two
// ready pods: its calls reach both, and a third the Deployment adds.
func followScaleOut(t *testing.T, ctx context.Context, ns string, raw []byte) {
	t.Helper()
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
}

// TestXDSManifest: deploy/xds as a user applies it (kubectl apply, the
// image set to a build the node holds) runs `pinlab xds serve` in a pod
// of the tier with its own service account: the manifest's RBAC lets it
// list and watch Services and EndpointSlices in every namespace and write
// the Warning event of a bad annotation, and a client given the
// manifest's bootstrap, with the control plane's Service ClusterIP, follows
// a scale-out. kubectl delete -f removes it all.
func TestXDSManifest(t *testing.T) {
	const ns = "xds-manifest"
	ctx := setUp(t, ns, 2)
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "xds", "pinlab-xds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("image: pinlab\n")) {
		t.Fatal("deploy/xds/pinlab-xds.yaml: no line image: pinlab to set")
	}
	manifest := filepath.Join(t.TempDir(), "pinlab-xds.yaml")
	if err := os.WriteFile(manifest, bytes.Replace(raw, []byte("image: pinlab\n"), []byte("image: "+tierImage+"\n"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, ctx, "apply", "-f", manifest)
	deleted := false
	defer func() {
		if !deleted {
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			exec.CommandContext(dctx, kubectlBin, "--kubeconfig", kubeconfig, "delete", "-f", manifest, "--wait=false").Run()
		}
	}()
	if err := theLab.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, state("pinlab-xds"))
	}
	cs := theLab.Cluster.Client()
	svc, err := cs.CoreV1().Services("pinlab-xds").Get(ctx, "pinlab-xds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boot, err := xds.Bootstrap(net.JoinHostPort(svc.Spec.ClusterIP, "18000"), xds.DefaultNode)
	if err != nil {
		t.Fatal(err)
	}
	followScaleOut(t, ctx, ns, boot)

	// A misspelt policy: the control plane's service account writes the
	// event (the manifest's events rule).
	p, err := cs.CoreV1().Services(ns).Get(ctx, "pricing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{"xds.pinlab.dev/lb-policy": "least_requests"}
	if _, err := cs.CoreV1().Services(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 30*time.Second, "the Warning event on the Service", func() bool {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + xds.ReasonBadAnnotation})
		return err == nil && len(evs.Items) > 0 && evs.Items[0].InvolvedObject.Name == "pricing"
	})
	logs := kubectl(t, ctx, "logs", "-n", "pinlab-xds", "deployment/pinlab-xds")
	if !strings.Contains(logs, "serving xDS on ") || !strings.Contains(logs, "every namespace") {
		t.Errorf("the control plane's log:\n%s", logs)
	}
	kubectl(t, ctx, "delete", "-f", manifest, "--timeout=60s")
	deleted = true
	for _, get := range [][]string{{"get", "clusterrole,clusterrolebinding", "-l", "app.kubernetes.io/name=pinlab-xds", "-o", "name"}, {"get", "namespace", "pinlab-xds", "--ignore-not-found", "-o", "name"}} {
		if out := strings.TrimSpace(kubectl(t, ctx, get...)); out != "" {
			t.Errorf("after kubectl delete -f: %s", out)
		}
	}
}
