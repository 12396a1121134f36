package kubetier

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pinlab/pinlab/internal/kubeletapi"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pki"
)

// TestKubectlLogs: kubectl logs reads a pod's container output through the
// API server and the kubelet API: what the pod wrote at start, with
// --timestamps and --tail; -f follows it as it grows; after a kill and
// restart, --previous shows the killed run's end and the current one the
// restart.
func TestKubectlLogs(t *testing.T) {
	ns := "logs"
	ctx := setUp(t, ns, 1)
	names, ips := readyPods(t, ctx, ns)
	pod := names[0]
	out := kubectl(t, ctx, "logs", "-n", ns, pod)
	if want := "serving gRPC (health, channelz) on " + ips[0] + ":8471, restart 0"; !strings.Contains(out, want) {
		t.Errorf("kubectl logs: %q, want a line with %q", out, want)
	}
	out = kubectl(t, ctx, "logs", "-n", ns, pod, "--timestamps", "--tail=1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z `).MatchString(lines[0]) {
		t.Errorf("kubectl logs --timestamps --tail=1: %q, want one line that starts with an RFC 3339 time", out)
	}

	follow := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", kubeconfig, "logs", "-f", "-n", ns, pod)
	var followed labtest.Buffer
	follow.Stdout, follow.Stderr = &followed, &followed
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { follow.Process.Kill(); follow.Wait() }()
	if err := labtest.Poll(ctx, 50*time.Millisecond, func() bool { return strings.Contains(followed.String(), "serving gRPC") }); err != nil {
		t.Fatalf("kubectl logs -f: %q", followed.String())
	}
	if err := theLab.HangPod(ns, pod, true); err != nil {
		t.Fatal(err)
	}
	if err := theLab.HangPod(ns, pod, false); err != nil {
		t.Fatal(err)
	}
	if err := labtest.Poll(ctx, 50*time.Millisecond, func() bool { return strings.Contains(followed.String(), "answering again") }); err != nil {
		t.Errorf("kubectl logs -f did not follow the hang and its end: %q", followed.String())
	}

	if out := kubectlFails(t, ctx, "logs", "-n", ns, pod, "--previous"); !strings.Contains(out, "previous terminated container") {
		t.Errorf("kubectl logs --previous before any restart: %q, want it to say there is no previous container", out)
	}
	if err := theLab.KillPod(ns, pod); err != nil {
		t.Fatal(err)
	}
	if err := labtest.Poll(ctx, 100*time.Millisecond, func() bool {
		p, err := theLab.Cluster.Client().CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}); err != nil {
		t.Fatalf("no restart after the kill: %s", state(ns))
	}
	prev := kubectl(t, ctx, "logs", "-n", ns, pod, "--previous")
	for _, want := range []string{"restart 0", "killed (SIGKILL)", "exited with code 137"} {
		if !strings.Contains(prev, want) {
			t.Errorf("kubectl logs --previous: %q, want %q in it", prev, want)
		}
	}
	if cur := kubectl(t, ctx, "logs", "-n", ns, pod); !strings.Contains(cur, "restart 1") || strings.Contains(cur, "killed") {
		t.Errorf("kubectl logs after the restart: %q, want the new run's output alone", cur)
	}
}

// TestKubectlPortForward: kubectl port-forward reaches a pod's gRPC port
// through the API server and the kubelet API, two forwards at once each
// carry calls, and a forward ends when its pod is deleted.
func TestKubectlPortForward(t *testing.T) {
	ns := "forward"
	ctx := setUp(t, ns, 1)
	names, _ := readyPods(t, ctx, ns)
	pod := names[0]
	first, firstDone := portForward(t, ctx, ns, pod)
	second, _ := portForward(t, ctx, ns, pod)
	for _, addr := range []string{first, second, first} {
		if err := healthCheck(ctx, addr); err != nil {
			t.Errorf("a gRPC health check through the forward at %s: %v", addr, err)
		}
	}
	if err := theLab.Cluster.Client().CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-firstDone:
		t.Logf("kubectl port-forward after the pod's deletion: %s", out)
	case <-time.After(60 * time.Second):
		t.Errorf("kubectl port-forward still runs 60 s after its pod was deleted")
	}
}

// portForward starts kubectl port-forward to pod's port 8471 on a free
// local port and returns that address and a channel that gets kubectl's
// output when it exits (it is killed at the end of the test).
func portForward(t testing.TB, ctx context.Context, ns, pod string) (string, <-chan string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", kubeconfig, "port-forward", "-n", ns, "pod/"+pod, "--address", "127.0.0.1", ":8471")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr labtest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	done := make(chan string, 1)  // kubectl's output, once it exited
	exited := make(chan struct{}) // closed after kubectl exited
	var out labtest.Buffer
	go func() {
		sc := bufio.NewScanner(stdout)
		re := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> 8471`)
		for sc.Scan() {
			out.Write([]byte(sc.Text() + "\n"))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrs <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
		done <- out.String() + stderr.String()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	select {
	case a := <-addrs:
		return a, done
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl port-forward printed no local address in 30 s: %s%s", out.String(), stderr.String())
	}
	return "", nil
}

// healthCheck makes one gRPC health check at addr.
func healthCheck(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestKubeletAPIRefuses: the Node reports the kubelet API's port; the API
// verifies with the cluster CA; a caller without credentials (or with a
// certificate of another CA, which a client does not send) gets 401, a
// service account without rights on the node 403; the admin gets the
// node's pods.
func TestKubeletAPIRefuses(t *testing.T) {
	needTier(t)
	ctx := labtest.Context(t, time.Minute)
	client := theLab.Cluster.Client()
	node, err := client.CoreV1().Nodes().Get(ctx, "pinlab-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Status.DaemonEndpoints.KubeletEndpoint.Port; got != kubeletapi.Port {
		t.Errorf("Node's kubelet endpoint port %d, want %d", got, kubeletapi.Port)
	}
	base := "https://" + netip.AddrPortFrom(theLab.NodeIP(), kubeletapi.Port).String()
	ns := "refuse"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("another")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.IssueTLS(pki.Leaf{CommonName: "admin", Organization: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		token  string
		cert   *tls.Certificate
		status int
	}{
		{name: "anonymous", path: "/pods", status: http.StatusUnauthorized},
		{name: "anonymous healthz", path: "/healthz", status: http.StatusUnauthorized},
		{name: "a bad token", path: "/pods", token: "not-a-token", status: http.StatusUnauthorized},
		{name: "a service account without rights", path: "/pods", token: tr.Status.Token, status: http.StatusForbidden},
		{name: "a service account's port-forward", path: "/portForward/" + ns + "/x", token: tr.Status.Token, status: http.StatusForbidden},
		// A TLS client sends only a certificate of a CA the server names:
		// this one stays unsent, and the call is anonymous.
		{name: "another CA's certificate", path: "/pods", cert: &stranger, status: http.StatusUnauthorized},
		{name: "the admin", path: "/pods", token: adminToken(), status: http.StatusOK},
		{name: "the admin, healthz", path: "/healthz", token: adminToken(), status: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: cp.KubeletCA().Pool()}
			if tt.cert != nil {
				cfg.Certificates = []tls.Certificate{*tt.cert}
			}
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
			defer hc.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if resp.StatusCode != tt.status {
				t.Errorf("status %d (%s), want %d", resp.StatusCode, body, tt.status)
			}
		})
	}
}

// adminToken is the control plane's admin bearer token.
func adminToken() string { return cp.RESTConfig().BearerToken }

// kubectlFails runs kubectl, which must fail, and returns its output.
func kubectlFails(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err == nil {
		t.Fatalf("kubectl %s succeeded: %s", strings.Join(args, " "), out)
	}
	return string(out)
}

// TestKubectlDebug: an ephemeral container added by kubectl debug is not
// run (the lab runs no images) but reported, as the kubelet reports an
// image it cannot pull: waiting, ErrImagePull, saying why.
func TestKubectlDebug(t *testing.T) {
	ns := "debug"
	ctx := setUp(t, ns, 1)
	names, _ := readyPods(t, ctx, ns)
	kubectl(t, ctx, "debug", "-n", ns, names[0], "--image=busybox", "--container=dbg", "--", "true")
	var got corev1.ContainerStatus
	err := labtest.Poll(ctx, 100*time.Millisecond, func() bool {
		p, err := theLab.Cluster.Client().CoreV1().Pods(ns).Get(ctx, names[0], metav1.GetOptions{})
		if err != nil || len(p.Status.EphemeralContainerStatuses) != 1 {
			return false
		}
		got = p.Status.EphemeralContainerStatuses[0]
		return true
	})
	if err != nil {
		t.Fatalf("no status for the ephemeral container: %s", state(ns))
	}
	if w := got.State.Waiting; got.Name != "dbg" || w == nil || w.Reason != "ErrImagePull" || !strings.Contains(w.Message, "busybox") {
		t.Errorf("ephemeral container status %+v, want dbg waiting with ErrImagePull naming its image", got)
	}
}

// TestKubectlExec: kubectl exec runs the pod's built-in commands through
// the API server and the kubelet API. With per-pod network namespaces,
// cat /proc/net/tcp in pod A lists A's listener and not B's (the node's
// namespace, which the pods share otherwise, lists both); the exit code
// reaches kubectl; standard input reaches sh.
func TestKubectlExec(t *testing.T) {
	ns := "exec"
	ctx := setUp(t, ns, 2)
	names, _ := readyPods(t, ctx, ns)
	if len(names) != 2 {
		t.Fatalf("want 2 ready pods, have %v", names)
	}
	var ips []string
	for _, name := range names {
		p, err := theLab.Cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ips = append(ips, p.Status.PodIP)
	}
	listener := func(ip string) string {
		a := netip.MustParseAddr(ip).As4()
		return fmt.Sprintf("%02X%02X%02X%02X:%04X 00000000:0000 0A", a[3], a[2], a[1], a[0], 8471)
	}
	tcp := kubectl(t, ctx, "exec", "-n", ns, names[0], "--", "cat", "/proc/net/tcp")
	own, other := strings.Contains(tcp, listener(ips[0])), strings.Contains(tcp, listener(ips[1]))
	switch {
	case !own:
		t.Errorf("pod %s's /proc/net/tcp lacks its own listener %s:\n%s", names[0], listener(ips[0]), tcp)
	case podNet != nil && other:
		t.Errorf("pod %s's /proc/net/tcp, in its own network namespace, lists pod %s's listener %s:\n%s", names[0], names[1], listener(ips[1]), tcp)
	case podNet == nil && !other:
		t.Errorf("pods share the node's namespace, yet pod %s's /proc/net/tcp lacks pod %s's listener:\n%s", names[0], names[1], tcp)
	}
	if out := kubectl(t, ctx, "exec", "-n", ns, names[1], "--", "ss", "-lnt"); !strings.Contains(out, ips[1]+":8471") {
		t.Errorf("ss -lnt in %s: %q, want its listener %s:8471", names[1], out, ips[1])
	}
	if out := kubectl(t, ctx, "exec", "-n", ns, names[0], "--", "cat", "/etc/resolv.conf"); !strings.Contains(out, "search exec.svc.cluster.local svc.cluster.local cluster.local") ||
		!strings.Contains(out, "nameserver "+theLab.Cluster.DNSIP().String()) {
		t.Errorf("/etc/resolv.conf: %q, want the pod's namespace's search path and the cluster DNS", out)
	}
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{args: []string{"false"}, code: 1},
		{args: []string{"curl", "http://example.com"}, code: 127, out: "curl: command not found"},
	} {
		cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig, "exec", "-n", ns, names[0], "--"}, c.args...)...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != c.code || !strings.Contains(string(out), c.out) {
			t.Errorf("kubectl exec -- %s: %v, %q; want exit %d and %q", strings.Join(c.args, " "), err, out, c.code, c.out)
		}
	}
	cmd := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", kubeconfig, "exec", "-i", "-n", ns, names[0], "--", "sh")
	cmd.Stdin = strings.NewReader("hostname\necho done\n")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != names[0]+"\ndone\n" {
		t.Errorf("kubectl exec -i sh: %v, %q; want the host name and done", err, out)
	}
}
