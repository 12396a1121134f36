package kubetier

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/remote"
	"github.com/pinlab/pinlab/scenarios"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pinlab image as cluster run names it on the tier: the tier's node
// holds its digest (startTier), as a node that pulled it would; the
// repository is never dialled.
const (
	tierDigest = "sha256:5f1e0c0ffee5f1e0c0ffee5f1e0c0ffee5f1e0c0ffee5f1e0c0ffee5f1e0c0ff"
	tierImage  = "registry.example/acme/pinlab@" + tierDigest
)

// userKubeconfig writes a kubeconfig that names the API server at the
// node's address, as a real cluster's, for the user's machine.
func userKubeconfig(t *testing.T) (path string, job userJob) {
	t.Helper()
	node := lab.NodeIP(netns.PodPrefix)
	u, err := url.Parse(cp.URL())
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(path, "https://"+net.JoinHostPort(node.String(), u.Port())); err != nil {
		t.Fatal(err)
	}
	return path, userJob{NodeIP: node.String(), Link: userPeer, Self: userSelfIP}
}

// leftovers lists the namespaces cluster runs left.
func leftovers(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := remote.Leftovers(ctx, theLab.Cluster.Client(), "", false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range left {
		names = append(names, l.Namespace)
	}
	return names
}

// TestClusterRunFromUserMachine: pinlab cluster run, from a machine whose
// only route leads to the API server at the node's address, runs
// scale-out and rollout on the tier with the expectations that lab run
// meets (exit 0: every expectation passed), and leaves nothing.
func TestClusterRunFromUserMachine(t *testing.T) {
	needTier(t)
	kc, job := userKubeconfig(t)
	for _, tt := range []struct {
		name, scenario string
		variants       string
	}{
		{"scale-out", lighterScaleOut(t), "clusterip,headless-rr-age"},
		{"rollout", "rollout", "stock,clusterip"},
		{"restart-client", "restart-client", "base"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Each scenario its own budget, two attempts of 4 min: one
			// 8 min budget for all three ran out in the third once the
			// first two took 449 s, and killed its run (exit -1), whose
			// namespace then misled TestClusterRunInterrupted.
			ctx := labtest.Context(t, 9*time.Minute)
			job.Args = []string{"cluster", "run", tt.scenario, "--variant", tt.variants, "--image", tierImage, "--yes",
				"--kubeconfig", kc, "--progress", "off"}
			var code int
			var stdout, stderr string
			// Exit 3: the machine put the load generator behind, so some
			// expectations could not be judged (INVALID). A failure in a
			// run the report marks OVERLOADED while this machine's load
			// was above its CPUs (a CI run at 80d7866: load 3.8, the
			// clients' pods behind, probes failing, a fairness check
			// failing with them) is not a measurement either; on a quiet
			// machine a failure counts.
			overloaded := func() bool {
				return code == 3 || code != 0 && strings.Contains(stdout, "OVERLOADED") && load1() > float64(runtime.NumCPU())
			}
			for attempt := 1; attempt <= 2; attempt++ {
				began := time.Now()
				code, stdout, stderr = startOnUserMachine(t, ctx, job, 4*time.Minute).wait(t)
				t.Logf("cluster run %s (%v, load %s): exit %d\nstderr:\n%s\nstdout:\n%s", tt.name, time.Since(began).Round(time.Second), loadAvg(), code, stderr, stdout)
				if !overloaded() {
					break
				}
			}
			if left := leftovers(t); len(left) > 0 {
				t.Errorf("cluster run %s left namespaces %q", tt.name, left)
			}
			if overloaded() {
				t.Skipf("cluster run %s: overloaded twice (exit %d with OVERLOADED), not judged", tt.name, code)
			}
			if code != 0 || !strings.Contains(stdout, "PASS") {
				t.Errorf("cluster run %s: exit %d, want 0 with every expectation passed", tt.name, code)
			}
		})
	}
}

// lighterScaleOut writes the built-in scale-out with each client at 50
// calls/s instead of 250 and returns the file's path. The expectations
// of the variants run here (the added pods' share of calls, Jain's index
// over the settled window) are ratios; at 50 calls/s a pod still answers
// about 400 calls in that window. On the tier every pod and load client
// runs in this test process, under the race detector in CI: at 250
// calls/s the eight clients of two variants took this process's whole
// core while another package's tests took the other (CI at 38f2175, load
// 3.3), and a client's events page took 20-48 s to marshal in its pod,
// more than a read's 15 s, so the run failed in set-up (2 of 2 runs
// beside one busy loop). A real cluster gives each pod its own share of a
// node.
func lighterScaleOut(t *testing.T) string {
	t.Helper()
	b, ok := scenarios.Get("scale-out")
	if !ok {
		t.Fatal("no built-in scale-out")
	}
	if strings.Count(string(b), "rate: 250\n") != 1 {
		t.Fatalf("the built-in scale-out no longer sets one client rate of 250:\n%s", b)
	}
	light := strings.Replace(string(b), "rate: 250\n", "rate: 50\n", 1)
	path := filepath.Join(t.TempDir(), "scale-out.yaml")
	if err := os.WriteFile(path, []byte(light), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestClusterRunInterrupted: a run stopped by Ctrl-C as soon as its
// namespace exists (while it is set up) or while its load runs deletes
// what it created; one killed (SIGKILL) leaves its namespace, which
// cluster clean leaves while the run's lease holds and deletes when told
// the run.
func TestClusterRunInterrupted(t *testing.T) {
	needTier(t)
	ctx := labtest.Context(t, 8*time.Minute)
	kc, job := userKubeconfig(t)
	list := func(selector string) int {
		ns, err := theLab.Cluster.Client().CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(ns.Items) == 0 {
			return 0
		}
		pods, err := theLab.Cluster.Client().CoreV1().Pods(ns.Items[0].Name).List(ctx, metav1.ListOptions{LabelSelector: remote.ClientLabel})
		if err != nil {
			return 1
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == "Running" {
				running++
			}
		}
		return 1 + running
	}
	for _, tt := range []struct {
		name string
		sig  syscall.Signal
		// when says when to signal: the namespace (1) or a client pod
		// running as well (2).
		when int
	}{
		{"Ctrl-C in setup", syscall.SIGINT, 1},
		{"Ctrl-C in load", syscall.SIGINT, 2},
		{"kill -9 in load", syscall.SIGKILL, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// list counts every run's namespaces: another's would signal
			// this run before it made its own.
			if left := leftovers(t); len(left) > 0 {
				t.Fatalf("namespaces an earlier run left: %q", left)
			}
			job.Args = []string{"cluster", "run", "scale-out", "--variant", "clusterip", "--image", tierImage, "--yes",
				"--kubeconfig", kc, "--progress", "off"}
			run := startOnUserMachine(t, ctx, job, 3*time.Minute)
			labtest.WaitFor(t, 2*time.Minute, tt.name, func() bool { return list(remote.RunLabel) >= tt.when })
			run.cmd.Process.Signal(tt.sig)
			code, _, stderr := run.wait(t)
			left := leftovers(t)
			switch tt.sig {
			case syscall.SIGINT:
				if code != 130 || len(left) > 0 {
					t.Errorf("after %s: exit %d (want 130), namespaces left %q (want none)\nstderr:\n%s", tt.name, code, left, stderr)
				}
			case syscall.SIGKILL:
				if len(left) != 1 {
					t.Fatalf("after kill -9: namespaces left %q, want the run's one", left)
				}
				// Its lease is held for 30 s after the last renewal: clean
				// leaves it unless the run is named.
				job.Args = []string{"cluster", "clean", "--yes", "--kubeconfig", kc}
				code, stdout, stderr := runOnUserMachine(t, ctx, job)
				if code != 0 || !strings.Contains(stdout, "is in progress") || len(leftovers(t)) != 1 {
					t.Errorf("cluster clean just after the kill: exit %d, left %q (want the run's, in progress)\nstdout:\n%s\nstderr:\n%s", code, leftovers(t), stdout, stderr)
				}
				run := strings.TrimSuffix(strings.TrimPrefix(left[0], "pinlab-"), "-0")
				job.Args = []string{"cluster", "clean", "--run", run, "--yes", "--kubeconfig", kc}
				code, stdout, stderr = runOnUserMachine(t, ctx, job)
				if code != 0 || !strings.Contains(stdout, "deleted namespace "+left[0]) || len(leftovers(t)) > 0 {
					t.Errorf("cluster clean --run %s: exit %d, left %q\nstdout:\n%s\nstderr:\n%s", run, code, leftovers(t), stdout, stderr)
				}
			}
		})
	}
}

// TestClusterRunRefused: what cluster run refuses, it refuses before
// anything is created, naming why: a user without the permissions (each
// one named), an image the node cannot pull (the pod named, within the
// pull bound), a context whose API server does not answer.
func TestClusterRunRefused(t *testing.T) {
	needTier(t)
	ctx := labtest.Context(t, 4*time.Minute)
	kc, job := userKubeconfig(t)
	unreachable, silent := kubeconfigAt(t, "https://10.250.0.9:6443"), kubeconfigAt(t, silentServer(t))
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no permission", []string{"--as", "nobody"}, 2, []string{"denies", "create namespaces", "create pods/portforward"}},
		{"unpullable image", []string{"--image", "registry.example/acme/other@sha256:" + strings.Repeat("e", 64)}, 1, []string{"ErrImagePull", "pricing-"}},
		{"unreachable context", []string{"--kubeconfig", unreachable}, 1, []string{"10.250.0.9", "unreachable"}},
		{"silent context", []string{"--kubeconfig", silent}, 1, []string{"did not answer within 10s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job.Args = append([]string{"cluster", "run", "scale-out", "--variant", "clusterip", "--image", tierImage, "--yes",
				"--kubeconfig", kc, "--progress", "off"}, tt.args...)
			began := time.Now()
			code, stdout, stderr := runOnUserMachine(t, ctx, job)
			t.Logf("%s: exit %d after %v\nstderr:\n%s", tt.name, code, time.Since(began).Round(time.Second), stderr)
			out := stdout + stderr
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s: output does not say %q", tt.name, w)
				}
			}
			if code != tt.code {
				t.Errorf("%s: exit %d, want %d", tt.name, code, tt.code)
			}
			if left := leftovers(t); len(left) > 0 {
				t.Errorf("%s: namespaces left %q", tt.name, left)
			}
		})
	}
}

// kubeconfigAt is a kubeconfig of the tier's credentials that names the
// API server at url.
func kubeconfigAt(t *testing.T, url string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(path, url); err != nil {
		t.Fatal(err)
	}
	return path
}

// silentServer listens at the node's address, where the user's machine
// has a route, accepts connections and never answers: an API server that
// hangs. It stops with the test.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(lab.NodeIP(netns.PodPrefix).String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "https://" + ln.Addr().String()
}

// loadAvg is the machine's load average over 1, 5 and 15 min.
// load1 is the 1-minute load average; 0 when unknown.
func load1() float64 {
	f, _ := strconv.ParseFloat(strings.Fields(loadAvg() + " ")[0], 64)
	return f
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
