package cli

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/conntrack"
	"github.com/pinlab/pinlab/internal/lab"
)

// TestLabUpKubeProxy runs `lab up --control-plane kubernetes --dataplane
// kube-proxy-nftables` as a user does: it says which dataplane runs,
// `lab exec -- pinlab lab load` reaches the pods through the ClusterIP
// the kernel DNATs (conntrack lists those connections from the clients'
// 10.244.254.N to the ClusterIP, answered by a pod), and Ctrl-C stops
// every process, kube-proxy included. It skips without the binaries, nft
// or conntrack (fails under PINLAB_REQUIRE_CONTROL_PLANE=1).
func TestLabUpKubeProxy(t *testing.T) {
	requireControlPlane(t, lab.DataplaneKubeProxyNFTables)
	ct, err := conntrack.Command()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pinlab := buildPinlab(t)
	ctl, tokenFile := freeAddr(t), filepath.Join(dir, "token")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	up := startLabUpBinary(t, pinlab, "-f", "scale-out", "--control-plane", "kubernetes", "--dataplane", "kube-proxy-nftables", "--control", ctl, "--token-file", tokenFile)
	printed := up.waitUp(ctx, t, "  export KUBECONFIG=")
	dataplane := ""
	if m := regexp.MustCompile(`(?m)^dataplane: (.*)$`).FindStringSubmatch(printed); m != nil {
		dataplane = m[1]
	}
	if !strings.HasPrefix(dataplane, "kube-proxy-nftables (the real kube-proxy v1.37.2 in nftables mode") {
		t.Errorf("lab up's dataplane line: %q; want the real kube-proxy in nftables mode", dataplane)
	}
	// Load through the ClusterIP, and conntrack's table while it runs.
	load := fmt.Sprintf("%s lab load pricing:8471 -n shop --clients 4 --rate 50 --duration 4s --control %s --token-file %s", pinlab, ctl, tokenFile)
	cmd := exec.CommandContext(ctx, pinlab, "lab", "exec", "--control", ctl, "--token-file", tokenFile, "--",
		"sh", "-c", load+" > load.out & sleep 2; "+ct+" -L -p tcp --orig-dst 10.96.0.0/16; wait $!; code=$?; cat load.out; exit $code")
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("lab exec -- lab load and conntrack -L: %v\n%s", err, out)
	}
	if !strings.Contains(out, "(0 failed)") || !strings.Contains(out, "pricing-") {
		t.Errorf("lab load through the real kube-proxy: want calls answered by pricing pods, none failed:\n%s", out)
	}
	dnat := regexp.MustCompile(`ESTABLISHED src=10\.244\.254\.\d+ dst=10\.96\.\d+\.\d+ sport=\d+ dport=8471 src=10\.244\.0\.\d+ dst=10\.244\.254\.\d+ sport=8471`)
	if n := len(dnat.FindAllString(out, -1)); n != 4 {
		t.Errorf("conntrack -L while 4 clients called: %d DNATed entries 10.244.254.N -> ClusterIP:8471 -> pod, want 4:\n%s", n, out)
	}
	up.stop(t)
}
