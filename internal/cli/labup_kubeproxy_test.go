package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/conntrack"
	"github.com/pinlab/pinlab/internal/controlplane"
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
	_, err := controlplane.BinDir()
	if err == nil {
		err = lab.DataplaneKubeProxyNFTables.Check()
	}
	if err != nil {
		if os.Getenv("PINLAB_REQUIRE_CONTROL_PLANE") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("builds pinlab and starts a control plane")
	}
	ct, err := conntrack.Command()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pinlab := filepath.Join(dir, "pinlab")
	if out, err := exec.Command("go", "build", "-o", pinlab, "../../cmd/pinlab").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctl, tokenFile := freeAddr(t), filepath.Join(dir, "token")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	up := exec.Command(pinlab, "lab", "up", "-f", "scale-out", "--control-plane", "kubernetes", "--dataplane", "kube-proxy-nftables", "--control", ctl, "--token-file", tokenFile)
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	up.Stderr = &stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- up.Wait()
	}()
	defer func() {
		if up.ProcessState == nil {
			up.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(time.Minute):
				up.Process.Kill()
			}
		}
	}()
	var dataplane string
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("lab up ended before it was up: %v\nstderr:\n%s", <-exited, stderr.String())
			}
			if d, ok := strings.CutPrefix(l, "dataplane: "); ok {
				dataplane = d
			}
			done = strings.HasPrefix(l, "  export KUBECONFIG=")
		case <-ctx.Done():
			t.Fatalf("lab up not up in time; stderr:\n%s", stderr.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
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
	up.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("lab up after Ctrl-C: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("lab up still running 90 s after Ctrl-C")
	}
	state := regexp.MustCompile(`state and logs in (\S+)\)`).FindStringSubmatch(stderr.String())
	if state == nil {
		t.Errorf("lab up did not say where its control plane's state is:\n%s", stderr.String())
	} else if left := processesWith(state[1]); len(left) > 0 {
		t.Errorf("processes left after lab up stopped (kube-proxy's kubeconfig is in the state directory too): %v", left)
	}
}
