package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// TestLabUpStopsWhenADataplaneProcessDies: when kube-proxy or CoreDNS
// dies under `lab up --dataplane kube-proxy-nftables`, lab up says which
// and stops (exit 1) rather than serve kube-proxy's stale rules or no DNS,
// leaving no process behind.
func TestLabUpStopsWhenADataplaneProcessDies(t *testing.T) {
	requireControlPlane(t, lab.DataplaneKubeProxyNFTables)
	pinlab := buildPinlab(t)
	tests := []struct {
		name    string
		process string // the executable's base name
	}{
		{name: "kube-proxy", process: "kube-proxy"},
		{name: "CoreDNS", process: "coredns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctl := freeAddr(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			up := startLabUpBinary(t, pinlab, "-f", "scale-out", "--control-plane", "kubernetes", "--dataplane", "kube-proxy-nftables",
				"--control", ctl, "--token-file", filepath.Join(t.TempDir(), "token"))
			up.waitUp(ctx, t, "  export KUBECONFIG=")
			state := regexp.MustCompile(`state and logs in (\S+)\)`).FindStringSubmatch(up.stderr.String())
			if state == nil {
				t.Fatalf("lab up did not say where its control plane's state is:\n%s", up.stderr.String())
			}
			var pid int
			for _, p := range processesWith(state[1]) {
				fields := strings.Fields(p)
				if len(fields) > 1 && filepath.Base(fields[1]) == tt.process {
					pid, _ = strconv.Atoi(strings.TrimSuffix(fields[0], ":"))
				}
			}
			if pid == 0 {
				t.Fatalf("no %s process of this lab among %v", tt.process, processesWith(state[1]))
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-up.exited:
				err := up.err
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 1 {
					t.Errorf("lab up after %s died: %v, want exit status 1", tt.process, err)
				}
			case <-ctx.Done():
				t.Fatalf("lab up still running after %s died:\n%s", tt.process, up.stderr.String())
			}
			stderr := up.stderr.String()
			if !strings.Contains(stderr, tt.name+" stopped while the lab ran") || !strings.Contains(stderr, "stopped\n") {
				t.Errorf("lab up's stderr does not say %s stopped, then that the lab stopped:\n%s", tt.name, stderr)
			}
			if left := processesWith(state[1]); len(left) > 0 {
				t.Errorf("processes left after lab up stopped: %v", left)
			}
			// The error names the components' logs: they are kept (a
			// tester found the named log deleted), and nothing else.
			kept := regexp.MustCompile(`logs are kept in (\S+);`).FindStringSubmatch(stderr)
			if kept == nil || kept[1] != state[1] {
				t.Fatalf("lab up did not say the logs are kept in %s:\n%s", state[1], stderr)
			}
			defer os.RemoveAll(kept[1])
			var logs, others []string
			filepath.WalkDir(kept[1], func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					if filepath.Ext(p) == ".log" {
						logs = append(logs, filepath.Base(p))
					} else {
						others = append(others, p)
					}
				}
				return nil
			})
			if !slices.Contains(logs, "kube-apiserver.log") || len(others) > 0 {
				t.Errorf("kept in %s: logs %v and %v; want the components' logs only", kept[1], logs, others)
			}
		})
	}
}
