package kubetier

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loopback"
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
	pf := &recordingForward{PortForward: &evidence.PortForward{Config: k.Config(), Pod: k.PodByIP}}
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
	*evidence.PortForward
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
