package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/dashboard"
	"github.com/pinlab/pinlab/internal/imagebuild"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/report"
)

// TestLabUpKubernetes runs the pinlab binary as a user does: lab up
// --control-plane kubernetes serves kubectl on the host (get, scale,
// rollout restart, rollout status, delete pod act on the lab), lab exec
// reaches the pods inside the lab's namespace, and Ctrl-C stops every
// component. It skips when the control plane is not built (fails under
// PINLAB_REQUIRE_CONTROL_PLANE=1).
func TestLabUpKubernetes(t *testing.T) {
	bin := requireControlPlane(t)
	dir := t.TempDir()
	pinlab := buildPinlab(t)
	ctl := freeAddr(t)
	tokenFile := filepath.Join(dir, "token")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	// The node holds the pinlab image that image build writes, by digest.
	images := filepath.Join(dir, "images")
	built, err := imagebuild.Build(ctx, imagebuild.Request{Image: imagebuild.Workload, Platforms: []string{"linux/amd64"}, Layout: images})
	if err != nil {
		t.Fatal(err)
	}
	up := startLabUpBinary(t, pinlab, "-f", "scale-out", "--control-plane", "kubernetes", "--control", ctl, "--token-file", tokenFile, "--images", images)
	printed := up.waitUp(ctx, t, "  export KUBECONFIG=")
	kubeconfig := kubeconfigOf(t, printed)
	if st, err := os.Stat(kubeconfig); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig %s: %v, mode %v; want 0600", kubeconfig, err, st.Mode())
	}
	kubectl := kubectlOn(ctx, t, bin, kubeconfig)
	pods := kubectl("get", "pods", "-o", "wide", "-n", "shop")
	if n := strings.Count(pods, "Running"); n < 2 || !strings.Contains(pods, "10.244.") || !strings.Contains(pods, "pinlab-node") {
		t.Fatalf("kubectl get pods -o wide: want the Running pricing pods on pinlab-node at 10.244.x.y:\n%s", pods)
	}
	kubectl("scale", "deployment/pricing", "-n", "shop", "--replicas", "4")
	kubectl("rollout", "status", "deployment/pricing", "-n", "shop", "--timeout", "150s")
	// The EndpointSlice controller follows the pods' readiness within
	// moments of rollout status seeing it.
	var ready string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		ready = kubectl("get", "endpointslices", "-n", "shop", "-l", "kubernetes.io/service-name=pricing", "-o", "jsonpath={.items[*].endpoints[*].conditions.ready}")
		if strings.Count(ready, "true") == 4 {
			break
		}
	}
	if strings.Count(ready, "true") != 4 {
		t.Errorf("after kubectl scale --replicas 4, the EndpointSlices' ready conditions are %q; want 4 true", ready)
	}
	// The lab's own view (through its control API) follows the API server.
	exec1 := labExecOn(ctx, pinlab, ctl, tokenFile)
	out, err := exec1(pinlab, "lab", "load", "pricing:8471", "-n", "shop", "--clients", "8", "--rate", "20", "--duration", "3s", "--control", ctl, "--token-file", tokenFile)
	if err != nil {
		t.Fatalf("lab exec -- pinlab lab load: %v\n%s", err, out)
	}
	if !strings.Contains(out, "pricing-") {
		t.Errorf("lab load through lab exec named no pod:\n%s", out)
	}
	// From the host, a client of the lab's pods is refused with the
	// command that works; lab up's own hint runs pinlab by its path.
	hostLoad := exec.CommandContext(ctx, pinlab, "lab", "load", "pricing:8471", "-n", "shop", "--duration", "1s", "--control", ctl, "--token-file", tokenFile)
	hostOut, err := hostLoad.CombinedOutput()
	there := regexp.MustCompile(`run it there: (.*)`).FindSubmatch(hostOut)
	if exitCodeOf(err) != ExitError || there == nil || !strings.HasPrefix(string(there[1]), pinlab+" lab exec") {
		t.Errorf("lab load from the host of a lab in its namespace: %v, want exit 1 naming lab exec:\n%s", err, hostOut)
	} else if out, err := exec.CommandContext(ctx, "sh", "-c", string(there[1])).CombinedOutput(); err != nil || !strings.Contains(string(out), "pricing-") {
		// The command it gives works as printed.
		t.Errorf("the command lab load gave, %s: %v\n%s", there[1], err, out)
	}
	if !strings.Contains(printed, pinlab+" lab exec --control "+ctl) || !strings.Contains(printed, "-- "+pinlab+" lab load") {
		t.Errorf("lab up's hints do not run pinlab by its path %s:\n%s", pinlab, printed)
	}
	// lab targets from the host lists the pods' metrics ports at their
	// 10.244 addresses and says those exist only inside the namespace.
	targets := exec.CommandContext(ctx, pinlab, "lab", "targets", "-n", "shop", "--control", ctl, "--token-file", tokenFile)
	var targetsErr strings.Builder
	targets.Stderr = &targetsErr
	if tout, err := targets.Output(); err != nil || !strings.Contains(string(tout), `"10.244.`) || !strings.Contains(targetsErr.String(), "only inside the lab's network namespace") {
		t.Errorf("lab targets on a real control plane: %v; want 10.244 targets and a note on where to scrape them\nstdout:\n%s\nstderr:\n%s", err, tout, targetsErr.String())
	}
	// diagnose through the kubeconfig, inside the namespace where the pod
	// IPs are: 2 clients through the ClusterIP on 4 pods leave 2 idle.
	out, err = exec1("sh", "-c", fmt.Sprintf("%[1]s lab load pricing:8471 -n shop --clients 2 --rate 50 --duration 20s --control %[2]s --token-file %[3]s >/dev/null & "+
		"sleep 2; KUBECONFIG=%[4]s %[1]s diagnose pricing -n shop --window 3s; code=$?; wait; exit $code", pinlab, ctl, tokenFile, kubeconfig))
	if code := exitCodeOf(err); code != ExitPinned || !strings.Contains(out, "VERDICT PINNED: connection-level balancing through a ClusterIP") {
		t.Errorf("diagnose --kubeconfig inside the lab's namespace: exit %d (%v), want %d and PINNED through the ClusterIP:\n%s", code, err, ExitPinned, out)
	}
	if _, err := exec1("true"); err != nil {
		t.Errorf("lab exec -- true: %v", err)
	}
	if out, err := exec1("sh", "-c", "exit 7"); err == nil || !strings.Contains(fmt.Sprint(err), "7") {
		t.Errorf("lab exec -- sh -c 'exit 7': %v, want exit status 7\n%s", err, out)
	}
	// From the host, the lab's pod and Service addresses do not route off
	// the machine while it runs (as root: an unreachable route), and the
	// routes go with the lab (checked with the route lookup, not traffic).
	if os.Geteuid() == 0 {
		for _, a := range []string{"10.244.0.5", "10.96.0.10"} {
			if r := routeTo(t, a); !unreachable(r) {
				t.Errorf("ip route get %s on the host while the lab runs: %q, want no route", a, r)
			}
		}
		defer func() {
			if out, _ := exec.Command("ip", "route", "show", "proto", "199").Output(); len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("pinlab's host routes after lab up stopped: %s", out)
			}
		}()
	}
	kubectl("rollout", "restart", "deployment/pricing", "-n", "shop")
	kubectl("rollout", "status", "deployment/pricing", "-n", "shop", "--timeout", "150s")
	// A rollout to the built image pinned by digest, under another name,
	// runs; an image the node does not hold waits with ErrImagePull.
	kubectl("set", "image", "deployment/pricing", "-n", "shop", "pricing=127.0.0.1:5000/acme/grpc-lab@"+built.Digest)
	kubectl("rollout", "status", "deployment/pricing", "-n", "shop", "--timeout", "150s")
	kubectl("create", "deployment", "foreign", "-n", "shop", "--image", "nginx:1.27")
	var reason string
	pulled := func() bool {
		reason = kubectl("get", "pods", "-n", "shop", "-l", "app=foreign", "-o", "jsonpath={.items[*].status.containerStatuses[*].state.waiting.reason}")
		return reason == "ErrImagePull"
	}
	if labtest.Poll(labtest.Context(t, 30*time.Second), 200*time.Millisecond, pulled) != nil {
		t.Errorf("a pod of image nginx:1.27 waits with %q, want ErrImagePull", reason)
	}
	victim := strings.Fields(kubectl("get", "pods", "-n", "shop", "-l", "app=pricing", "-o", "jsonpath={.items[0].metadata.name}"))[0]
	kubectl("delete", "pod", victim, "-n", "shop", "--wait=true", "--timeout=60s")
	kubectl("rollout", "status", "deployment/pricing", "-n", "shop", "--timeout", "150s")

	up.stop(t)
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig %s left behind: %v", kubeconfig, err)
	}
	var d net.Dialer
	if c, err := d.DialContext(ctx, "tcp", ctl); err == nil {
		c.Close()
		t.Errorf("the control API %s still accepts after lab up stopped", ctl)
	}
}

// routeTo is the host's route to addr (`ip route get`), or ip's error.
func routeTo(t *testing.T, addr string) string {
	t.Helper()
	out, _ := exec.Command("ip", "route", "get", addr).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// unreachable reports whether route, what routeTo printed, is no route.
func unreachable(route string) bool {
	return strings.Contains(route, "No route to host") || strings.HasPrefix(route, "unreachable")
}

// processesWith lists the command lines of processes whose command line
// contains s.
func processesWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		f, err := os.Open(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(f, 4096))
		f.Close()
		if cmd := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmd, s) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}

// exitCodeOf is a command's exit code from its Run error.
func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestLabRunKubernetesUI: lab run --control-plane kubernetes --ui serves
// its dashboard on the host's loopback while the run goes inside the
// lab's network namespace (the listener is bound on the host and handed
// over), and the run still reports.
func TestLabRunKubernetesUI(t *testing.T) {
	requireControlPlane(t)
	pinlab := buildPinlab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	html := filepath.Join(t.TempDir(), "report.html")
	cmd := exec.CommandContext(ctx, pinlab, "lab", "run", writeScenario(t, 6*time.Second, 2*time.Second), "--variant", "clusterip",
		"--control-plane", "kubernetes", "--ui", "--ui-addr", "127.0.0.1:0", "--progress", "off", "-o", "json", "--html", html)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr labtest.Buffer
	url := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderrPipe)
		for sc.Scan() {
			stderr.Write([]byte(sc.Text() + "\n"))
			if u, ok := strings.CutPrefix(sc.Text(), "dashboard: "); ok {
				select {
				case url <- u:
				default:
				}
			}
		}
	}()
	select {
	case u := <-url:
		// The page, then its panels with the token, as the page's script
		// fetches them: the variant's panel is there.
		page, token, _ := strings.Cut(u, "/#token=")
		req, _ := http.NewRequestWithContext(ctx, "GET", page+dashboard.PanelsPath, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s from the host: %v", req.URL, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "clusterip") {
			t.Errorf("GET %s: %s, want 200 and the variant's panel:\n%.300s", req.URL, resp.Status, body)
		}
	case <-copied:
		t.Fatalf("lab run printed no dashboard address:\n%s", stderr.String())
	case <-ctx.Done():
		t.Fatalf("no dashboard address in time:\n%s", stderr.String())
	}
	<-copied
	if err := cmd.Wait(); err != nil {
		t.Fatalf("lab run --control-plane kubernetes --ui: %v\n%s", err, stderr.String())
	}
	res, err := report.ReadJSON(&stdout)
	if err != nil || len(res.Variants) != 1 {
		t.Fatalf("lab run's JSON: %v, %d variants; want one", err, len(res.Variants))
	}
	// The run inside the namespace wrote the HTML report; the command on
	// the host left it there.
	if page, err := os.ReadFile(html); err != nil || !bytes.Contains(page, []byte("clusterip")) {
		t.Errorf("--html %s after the run: %v, %d bytes; want the report with the variant", html, err, len(page))
	}
}

// TestLabUpKubernetesComponentFails: a control plane component that exits
// at start makes lab up fail with its log's last lines, and keeps the
// components' logs (only) where the error says, with nothing left running.
func TestLabUpKubernetesComponentFails(t *testing.T) {
	bin := requireControlPlane(t)
	pinlab := buildPinlab(t)
	fake := t.TempDir()
	for _, c := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-proxy", "kubectl"} {
		if err := os.Symlink(filepath.Join(bin, c), filepath.Join(fake, c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(fake, "kube-controller-manager"), []byte("#!/bin/sh\necho refusing to start: test\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	up := exec.CommandContext(ctx, pinlab, "lab", "up", "--control-plane", "kubernetes", "--control", freeAddr(t), "--token-file", filepath.Join(t.TempDir(), "token"))
	up.Env = append(os.Environ(), "PINLAB_CONTROL_PLANE_BIN="+fake)
	out, err := up.CombinedOutput()
	if exitCodeOf(err) != ExitError || !strings.Contains(string(out), "kube-controller-manager exited") || !strings.Contains(string(out), "refusing to start: test") {
		t.Fatalf("lab up with a failing kube-controller-manager: %v, want exit 1 quoting its log:\n%s", err, out)
	}
	kept := regexp.MustCompile(`logs are kept in (\S+);`).FindStringSubmatch(string(out))
	if kept == nil {
		t.Fatalf("lab up did not say where the logs are kept:\n%s", out)
	}
	defer os.RemoveAll(kept[1])
	log, err := os.ReadFile(filepath.Join(kept[1], "kube-controller-manager.log"))
	if err != nil || !strings.Contains(string(log), "refusing to start: test") {
		t.Errorf("kept log: %v, %q", err, log)
	}
	ents, _ := os.ReadDir(kept[1])
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".log" {
			t.Errorf("kept %s beside the logs; want only *.log", e.Name())
		}
	}
	if left := processesWith(kept[1]); len(left) > 0 {
		t.Errorf("processes left after lab up failed: %v", left)
	}
}

// TestLabUpKubernetesKilled: kill -9 of lab up's process in the network
// namespace, or of lab up itself, leaves no key, token or kubeconfig
// behind (the components' logs aside), and the first says what died; the
// next lab up sweeps what the second left (a tester found 123 MB with
// tokens.csv and sa.key left, and exit 137 with no message).
func TestLabUpKubernetesKilled(t *testing.T) {
	requireControlPlane(t)
	pinlab := buildPinlab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	secrets := func(tmp string) []string { // what must not be left: anything but logs
		var left []string
		filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && filepath.Ext(p) != ".log" && filepath.Base(p) != "owner" {
				left = append(left, p)
			}
			return nil
		})
		return left
	}
	start := func(tmp string) (*upProcess, string) { // tmp is the labs' TMPDIR: their sessions are there
		dir := t.TempDir()
		up := startLabUpEnv(t, pinlab, []string{"TMPDIR=" + tmp}, "-f", "scale-out", "--control-plane", "kubernetes", "--control", freeAddr(t), "--token-file", filepath.Join(dir, "token"))
		up.waitUp(ctx, t, "  export KUBECONFIG=")
		return up, dir
	}

	t.Run("the process inside", func(t *testing.T) {
		tmp := t.TempDir()
		up, dir := start(tmp)
		inner := childPID(t, up.cmd.Process.Pid)
		syscall.Kill(inner, syscall.SIGKILL)
		select {
		case <-up.exited:
			if err := up.err; exitCodeOf(err) != ExitError || !strings.Contains(up.stderr.String(), "the lab's process in its network namespace was killed by signal 9 (killed)") {
				t.Errorf("lab up after its process inside was killed: %v\nstderr:\n%s", err, up.stderr.String())
			}
		case <-ctx.Done():
			t.Fatal("lab up still running after its process inside was killed")
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("the token file's directory holds %v after the kill; want the token and the kubeconfig removed", ents)
		}
		if left := secrets(tmp); len(left) != 0 {
			t.Errorf("left after the kill: %v", left)
		}
	})
	t.Run("lab up itself", func(t *testing.T) {
		tmp := t.TempDir()
		up, _ := start(tmp)
		inner := childPID(t, up.cmd.Process.Pid)
		up.cmd.Process.Kill()
		<-up.exited
		labtest.WaitFor(t, time.Minute, "the process inside to stop", func() bool { return syscall.Kill(inner, 0) != nil })
		next, _ := start(tmp) // its start sweeps what the first left
		next.stop(t)
		if left := secrets(tmp); len(left) != 0 {
			t.Errorf("left after lab up was killed and another started: %v", left)
		}
		if ents, _ := filepath.Glob(filepath.Join(tmp, "pinlab-lab-*")); len(ents) != 0 {
			t.Errorf("sessions left: %v", ents)
		}
	})
}

// childPID is the pid of pid's child (lab up's process in the network
// namespace), forked by whichever of pid's threads.
func childPID(t *testing.T, pid int) int {
	t.Helper()
	var child int
	labtest.WaitFor(t, 10*time.Second, "lab up's child", func() bool {
		files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if fs := strings.Fields(string(b)); len(fs) > 0 {
				n, err := strconv.Atoi(fs[0])
				child = n
				return err == nil
			}
		}
		return false
	})
	return child
}

// TestLabUpKubernetesTwoLabsRoutes: two labs on real control planes, with
// different TMPDIRs, hold the host's unreachable routes together: the
// first to stop leaves them to the second, the second removes them (a
// tester found them left after both stopped, or removed while one ran).
func TestLabUpKubernetesTwoLabsRoutes(t *testing.T) {
	requireControlPlane(t)
	if os.Geteuid() != 0 {
		t.Skip("the host's routes are changed only as root")
	}
	pinlab := buildPinlab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := func() *upProcess {
		up := startLabUpEnv(t, pinlab, []string{"TMPDIR=" + t.TempDir()}, "--control-plane", "kubernetes", "--control", freeAddr(t), "--token-file", filepath.Join(t.TempDir(), "token"))
		up.waitUp(ctx, t, "  export KUBECONFIG=")
		return up
	}
	routes := func() string {
		out, _ := exec.Command("ip", "route", "show", "proto", "199").Output()
		return strings.TrimSpace(string(out))
	}
	a := start()
	b := start()
	a.stop(t)
	if r := routeTo(t, "10.244.0.5"); !unreachable(r) {
		t.Errorf("the second lab still runs: ip route get 10.244.0.5 = %q, want no route", r)
	}
	b.stop(t)
	if r := routes(); r != "" {
		t.Errorf("pinlab's host routes after both labs stopped: %s", r)
	}
}
