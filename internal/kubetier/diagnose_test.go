package kubetier

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pinlab/pinlab/internal/cli"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podforward"
	"google.golang.org/grpc/codes"
)

// TestDiagnoseThroughPortForward: evidence.Collect with the Kube source on
// the tier's kubeconfig and the Channelz sampler through the API server's
// port-forward (the API server, then the node's kubelet API, then the
// pod's namespace) reads both pods of a headless Service while a
// round_robin client calls them from its own pod address: each pod is
// sampled through a forward on 127.0.0.1, never at its pod IP, with the
// client's calls and its one connection, and the sampler's own connection
// (which the pod sees coming from the kubelet's side) is not listed.
func TestDiagnoseThroughPortForward(t *testing.T) {
	ns := "diagnose"
	ctx := setUp(t, ns, 2)
	names, ips := readyPods(t, ctx, ns)
	if len(names) != 2 {
		t.Fatalf("ready pods %v: want 2", names)
	}
	source, err := clientIP()
	if err != nil {
		t.Fatal(err)
	}
	calls := &podCalls{}
	c, err := load.New(load.Config{Name: "order-0", Source: source, Policy: "round_robin", Rate: 100, Observer: calls,
		Target: fmt.Sprintf("dns://%s/pricing-headless.%s.svc.cluster.local:8471", theLab.DNSAddr(), ns)})
	if err != nil {
		t.Fatal(err)
	}
	stop := labtest.Run(t, c.Run)
	labtest.WaitFor(t, 30*time.Second, "the client's calls to reach both pods", func() bool { return len(calls.pods()) == 2 })

	k := &evidence.Kube{Kubeconfig: kubeconfig, Namespace: ns}
	if _, err := k.Load(); err != nil {
		t.Fatal(err)
	}
	pf := &recordingForward{PortForward: &podforward.PortForward{Config: k.Config(), Pod: k.PodByIP}}
	cz := &evidence.Channelz{Dialer: pf}
	defer cz.Close()
	const window = 3 * time.Second
	ev, err := evidence.Collect(ctx, k, evidence.Request{Namespace: ns, Service: "pricing-headless", Window: window, Sampler: cz})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ev.Source, "API server https://") {
		t.Errorf("source %q, want the kubeconfig's API server", ev.Source)
	}
	if len(ev.Pods) != 2 {
		t.Fatalf("pods %+v, want the 2 pricing pods", ev.Pods)
	}
	for _, p := range ev.Pods {
		// 100 calls/s over both pods: about 150 each in the window.
		if p.Err != "" || p.Calls.Started < 50 || p.Health != "SERVING" {
			t.Errorf("pod %s: error %q, calls %+v, health %q; want it sampled, with at least 50 of the client's calls, SERVING", p.Name, p.Err, p.Calls, p.Health)
		}
		if len(p.Conns) != 1 || !strings.HasPrefix(p.Conns[0].Remote, source.String()+":") || p.Conns[0].Calls == 0 {
			t.Errorf("pod %s: connections %+v; want only the client's, from %s, busy (the sampler's own left out)", p.Name, p.Conns, source)
		}
	}
	var dialled []string
	for addr, remote := range pf.dials() {
		dialled = append(dialled, addr.Addr().String())
		if !remote.Addr().IsLoopback() || remote.Addr() == addr.Addr() {
			t.Errorf("pod %s: the sampler's connection went to %s, want its forward on 127.0.0.1", addr, remote)
		}
	}
	slices.Sort(dialled)
	if !slices.Equal(dialled, ips) {
		t.Errorf("dialled through port-forward %v, want the pods %v", dialled, ips)
	}
}

// podCalls counts a load client's successful calls by pod.
type podCalls struct {
	mu sync.Mutex
	by map[string]int
}

func (c *podCalls) Called(r load.Result) {
	if r.Code != codes.OK {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.by[r.Pod]++
}

func (c *podCalls) Conn(load.ConnEvent) {}

func (c *podCalls) pods() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.by)
}

// recordingForward is a PortForward that records, for each pod address
// the sampler dials, where the connection it got goes.
type recordingForward struct {
	*podforward.PortForward
	mu     sync.Mutex
	remote map[netip.AddrPort]netip.AddrPort
}

func (r *recordingForward) DialContext(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	c, err := r.PortForward.DialContext(ctx, addr)
	if err == nil {
		r.mu.Lock()
		if r.remote == nil {
			r.remote = map[netip.AddrPort]netip.AddrPort{}
		}
		r.remote[addr] = loopback.AddrPort(c.RemoteAddr())
		r.mu.Unlock()
	}
	return c, err
}

func (r *recordingForward) dials() map[netip.AddrPort]netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.remote)
}

// TestDiagnoseThroughAgent: pods that serve no channelz are read by
// pinlab-agent ephemeral containers, added through the real API server
// with the user's consent (once: a second run reuses them) and run by the
// lab's kubelet in each pod's network namespace; their output comes back
// through pods/log. A pick_first client through the ClusterIP pins to one
// pod: the busy pod shows the client's one connection with its bytes, the
// other none, and the verdict is pinned on the ClusterIP connection.
func TestDiagnoseThroughAgent(t *testing.T) {
	ns := "agent"
	ctx := setUp(t, ns, 2, "--no-channelz")
	source, err := clientIP()
	if err != nil {
		t.Fatal(err)
	}
	calls := &podCalls{}
	c, err := load.New(load.Config{Name: "order-0", Source: source, Policy: "pick_first", Rate: 50, Observer: calls,
		Target: fmt.Sprintf("dns://%s/pricing.%s.svc.cluster.local:8471", theLab.DNSAddr(), ns)})
	if err != nil {
		t.Fatal(err)
	}
	stop := labtest.Run(t, c.Run)
	defer stop()
	labtest.WaitFor(t, 30*time.Second, "the client's calls", func() bool { return len(calls.pods()) == 1 })

	k := &evidence.Kube{Kubeconfig: kubeconfig, Namespace: ns}
	if _, err := k.Load(); err != nil {
		t.Fatal(err)
	}
	// Without --yes nothing is added: diagnose says what it would do and
	// cannot tell.
	var out, errb strings.Builder
	code := cli.Main([]string{"diagnose", "pricing", "-n", ns, "--kubeconfig", kubeconfig, "--window", "1s", "--no-exec", "--agent-image", "registry.example/tools/pinlab-agent:test"}, &out, &errb)
	if code != cli.ExitUnknown || !strings.Contains(errb.String(), `diagnose would add an ephemeral container "pinlab-agent" (image registry.example/tools/pinlab-agent:test`) ||
		!strings.Contains(errb.String(), "Run again with --yes") || !strings.Contains(out.String(), "serve no channelz") {
		t.Errorf("without --yes: exit %d, want %d, saying what it would add\nstdout:\n%s\nstderr:\n%s", code, cli.ExitUnknown, out.String(), errb.String())
	}
	pods, err := theLab.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if len(p.Spec.EphemeralContainers) > 0 {
			t.Errorf("pod %s has ephemeral containers %v without consent", p.Name, p.Spec.EphemeralContainers)
		}
	}

	asked := 0
	collect := func() evidence.Evidence {
		cz := &evidence.Channelz{Dialer: &podforward.PortForward{Config: k.Config(), Pod: k.PodByIP}}
		defer cz.Close()
		ag := &evidence.Agents{Config: k.Config(), Pod: k.PodByIP, Image: "registry.example/tools/pinlab-agent:test",
			Confirm: func(string, []string, string) bool { asked++; return true }}
		defer ag.Close()
		ev, err := evidence.Collect(ctx, k, evidence.Request{Namespace: ns, Service: "pricing", Window: 3 * time.Second, Sampler: cz, Agents: ag})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	before, since := calls.pods(), time.Now()
	ev := collect()
	after, took := calls.pods(), time.Since(since)
	if asked != 1 || ev.RatesFrom != "agent" || ev.Unit != "bytes" {
		t.Fatalf("asked %d times, rates from %q in %q (problems %q); want one consent, the agents' bytes", asked, ev.RatesFrom, ev.Unit, ev.Problems)
	}
	var busy, idle int
	for _, p := range ev.Pods {
		switch {
		case p.Err != "":
			t.Errorf("pod %s: %s", p.Name, p.Err)
		case len(p.Conns) == 1 && strings.HasPrefix(p.Conns[0].Remote, source.String()+":") && p.Calls.Started > 0:
			busy++
			if n := after[p.Name] - before[p.Name]; n > 0 && p.Span > 0 {
				// Bytes a second over the readings' span, over calls a
				// second over the whole collection (adding the agents
				// takes seconds more than the span; the client's rate
				// is steady).
				callRate := float64(n) / took.Seconds()
				per := float64(p.Calls.Started) / p.Span.Seconds() / callRate
				t.Logf("pod %s: %d bytes both ways over %v; the client made %d calls in %v (%.1f/s): about %.0f bytes a call", p.Name, p.Calls.Started, p.Span, n, took.Round(time.Millisecond), callRate, per)
				// diagnose.MinConnBytes (350 bytes/s) stands for about 1.5
				// small calls a second at about 230 bytes a call.
				if per < 100 || per > 400 {
					t.Errorf("about %.0f bytes a call, want 100 to 400: MinConnBytes assumes about 230", per)
				}
			}
		case len(p.Conns) == 0 && p.Calls.Started == 0:
			idle++
		default:
			t.Errorf("pod %s: connections %+v, bytes %d", p.Name, p.Conns, p.Calls.Started)
		}
	}
	if busy != 1 || idle != 1 {
		t.Errorf("%d busy and %d idle pods, want 1 and 1", busy, idle)
	}
	r := diagnose.Diagnose(ev)
	if r.Verdict != diagnose.Pinned || r.Cause != "clusterip-connection" {
		t.Errorf("verdict %s (%s): %s", r.Verdict, r.Cause, r.Why)
	}
	// A second run, as a user runs it (kubectl's flags, no --yes): it
	// checks the permissions first and reuses the agents without asking.
	out.Reset()
	errb.Reset()
	code = cli.Main([]string{"diagnose", "pricing", "-n", ns, "--kubeconfig", kubeconfig, "--window", "3s"}, &out, &errb)
	if code != cli.ExitPinned || !strings.Contains(out.String(), "BYTES/S") || !strings.Contains(errb.String(), "reading the pinlab-agent of 2 pods") ||
		strings.Contains(errb.String(), "--yes") || strings.Contains(errb.String(), "permission") {
		t.Errorf("pinlab diagnose: exit %d, want %d with the agents' bytes, reused without asking\nstdout:\n%s\nstderr:\n%s", code, cli.ExitPinned, out.String(), errb.String())
	}
}

// TestDiagnoseThroughExec: pods that serve no channelz and have no agent
// are read through pods/exec (`cat /proc/net/tcp /proc/net/tcp6` in the
// server container, run by the lab's kubelet in each pod's network
// namespace), which adds nothing to them. A pick_first client through the
// ClusterIP holds one connection to one of 3 pods: the verdict is pinned,
// from connections alone, and the figures say they are connections.
func TestDiagnoseThroughExec(t *testing.T) {
	ns := "exec"
	ctx := setUp(t, ns, 3, "--no-channelz")
	source, err := clientIP()
	if err != nil {
		t.Fatal(err)
	}
	calls := &podCalls{}
	c, err := load.New(load.Config{Name: "order-0", Source: source, Policy: "pick_first", Rate: 20, Observer: calls,
		Target: fmt.Sprintf("dns://%s/pricing.%s.svc.cluster.local:8471", theLab.DNSAddr(), ns)})
	if err != nil {
		t.Fatal(err)
	}
	stop := labtest.Run(t, c.Run)
	defer stop()
	labtest.WaitFor(t, 30*time.Second, "the client's calls", func() bool { return len(calls.pods()) == 1 })

	var out, errb strings.Builder
	code := cli.Main([]string{"diagnose", "pricing", "-n", ns, "--kubeconfig", kubeconfig, "--window", "3s", "--no-agent", "-o", "json"}, &out, &errb)
	if !strings.Contains(errb.String(), "reading /proc/net/tcp, through exec, in 3 pods over 3s") {
		t.Errorf("stderr does not say the pods are read through exec:\n%s", errb.String())
	}
	var r diagnose.Result
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("exit %d, stdout not a result (%v):\n%s\nstderr:\n%s", code, err, out.String(), errb.String())
	}
	ev := r.Evidence
	if code != cli.ExitPinned || r.Cause != "clusterip-connection" || ev.RatesFrom != "exec" || ev.Unit != evidence.UnitConnMs || r.Rates.Unit != "connections" {
		t.Fatalf("exit %d (%s, %s), rates from %q in %q/%q; want %d, clusterip-connection, from exec in connections\nproblems %q\nstderr:\n%s",
			code, r.Verdict, r.Cause, ev.RatesFrom, ev.Unit, r.Rates.Unit, cli.ExitPinned, ev.Problems, errb.String())
	}
	busy, idle := 0, 0
	for _, p := range r.Rates.Pods {
		switch {
		case p.Err != "":
			t.Errorf("pod %s: %s", p.Name, p.Err)
		case p.Rate > 0.9 && p.Rate < 1.1 && p.Conns == 1:
			busy++
		case p.Idle:
			idle++
		default:
			t.Errorf("pod %s: %.2f connections, %d open; want 1 and 1, or idle", p.Name, p.Rate, p.Conns)
		}
	}
	if busy != 1 || idle != 2 {
		t.Errorf("%d pods with the client's connection and %d idle, want 1 and 2", busy, idle)
	}
	if len(r.Clients) != 1 || r.Clients[0].IP != source.String() || r.Clients[0].Busy != 1 {
		t.Errorf("clients %+v; want %s with one busy connection", r.Clients, source)
	}
	pods, err := theLab.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if len(p.Spec.EphemeralContainers) > 0 {
			t.Errorf("pod %s has ephemeral containers %v: exec adds none", p.Name, p.Spec.EphemeralContainers)
		}
	}
}
