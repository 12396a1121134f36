package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
)

// TestLabUpKubernetesXDS: deploy/xds on a lab on the real control plane,
// as docs/xds.md has a user try it: kubectl applies the manifest as it is
// (image pinlab, which the lab's node runs) and annotates the Service;
// lab load's clients, inside the lab's namespace, dial the xDS name with
// --xds-server at the control plane's ClusterIP and reach every pod; while
// they run, diagnose finds the calls balanced and names the Service's xDS
// policy. A target without --xds-server is a usage error (exit 2).
func TestLabUpKubernetesXDS(t *testing.T) {
	bin := requireControlPlane(t)
	dir := t.TempDir()
	pinlab := buildPinlab(t)
	ctl := freeAddr(t)
	tokenFile := filepath.Join(dir, "token")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	up := startLabUpBinary(t, pinlab, "-f", "scale-out", "--control-plane", "kubernetes", "--control", ctl, "--token-file", tokenFile)
	defer up.stop(t)
	printed := up.waitUp(ctx, t, "  export KUBECONFIG=")
	kubeconfig := kubeconfigOf(t, printed)
	kubectl := kubectlOn(ctx, t, bin, kubeconfig)
	kubectl("apply", "-f", filepath.Join("..", "..", "deploy", "xds", "pinlab-xds.yaml"))
	kubectl("annotate", "service", "pricing", "-n", "shop", "xds.pinlab.dev/lb-policy=least_request")
	kubectl("rollout", "status", "deployment/pinlab-xds", "-n", "pinlab-xds", "--timeout", "120s")
	server := strings.TrimSpace(kubectl("get", "service", "pinlab-xds", "-n", "pinlab-xds", "-o", "jsonpath={.spec.clusterIP}")) + ":18000"
	exec1 := labExecOn(ctx, pinlab, ctl, tokenFile)
	// A Ready pod is not yet a routed Service: until kube-proxy has
	// programmed the endpoint, connects to the ClusterIP are refused, and
	// grpc-go's xDS clients fail their calls meanwhile (once 265 of 400).
	host, port, _ := strings.Cut(server, ":")
	if out, err := exec1("timeout", "30", "bash", "-c", "until (echo > /dev/tcp/"+host+"/"+port+") 2>/dev/null; do sleep 0.2; done"); err != nil {
		t.Fatalf("the xDS control plane's Service %s: not reachable from inside the lab within 30 s: %v\n%s", server, err, out)
	}
	loadArgs := []string{pinlab, "lab", "load", "xds:///pricing.shop:8471", "--control", ctl, "--token-file", tokenFile, "--clients", "2", "--rate", "50"}
	out, err := exec1(append(loadArgs, "--xds-server", server, "--duration", "4s")...)
	if err != nil || strings.Count(out, "\npricing-") != 2 || !strings.Contains(out, "(0 failed)") {
		t.Errorf("lab load over xDS: %v; want calls on both pods and none failed:\n%s", err, out)
	}
	if out, err := exec1(append(loadArgs, "--duration", "1s")...); exitCodeOf(err) != ExitUsage || !strings.Contains(out, "--xds-server") {
		t.Errorf("lab load xds:/// without --xds-server: %v, want exit %d naming --xds-server:\n%s", err, ExitUsage, out)
	}
	out, err = exec1("sh", "-c", strings.Join(append(loadArgs, "--xds-server", server, "--duration", "15s"), " ")+" >/dev/null & "+
		"sleep 3; KUBECONFIG="+kubeconfig+" "+pinlab+" diagnose pricing -n shop --window 3s; code=$?; wait; exit $code")
	if err != nil || !strings.Contains(out, "VERDICT BALANCED") || !strings.Contains(strings.Join(strings.Fields(out), " "), "annotated for pinlab's xDS control plane (least_request)") {
		t.Errorf("diagnose while xDS clients call: %v; want BALANCED naming the Service's xDS policy:\n%s", err, out)
	}
	kubectl("delete", "-f", filepath.Join("..", "..", "deploy", "xds", "pinlab-xds.yaml"), "--timeout", "60s")

	// A SIGINT to lab exec alone (not its process group) reaches the
	// command it runs.
	sleeper := exec.CommandContext(ctx, pinlab, "lab", "exec", "--control", ctl, "--token-file", tokenFile, "--", "sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	started := func() bool { // the command itself, not lab exec's own command line
		for _, p := range processesWith("sleep 30") {
			if _, cmd, _ := strings.Cut(p, ": "); strings.HasPrefix(cmd, "sleep 30") {
				return true
			}
		}
		return false
	}
	if labtest.Poll(labtest.Context(t, 10*time.Second), 50*time.Millisecond, started) != nil {
		t.Fatal("lab exec -- sleep 30: no sleep process within 10 s")
	}
	sleeper.Process.Signal(os.Interrupt)
	began := time.Now()
	err = sleeper.Wait()
	if took := time.Since(began); took > 5*time.Second || exitCodeOf(err) != ExitInterrupted {
		t.Errorf("lab exec -- sleep 30 after SIGINT to lab exec: %v after %v, want exit %d at once", err, took, ExitInterrupted)
	}
}
