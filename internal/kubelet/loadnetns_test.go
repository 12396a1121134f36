package kubelet

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
	"github.com/pinlab/pinlab/internal/podnet"
)

// inNetns reports whether t runs inside a private network namespace
// (package netns, set up by TestMain), where pods may have namespaces of
// their own. Outside one it runs t again, alone, in a new one (as
// netnstest.Main runs a whole package) and passes on how it went there:
// the child's output is logged, its failure fails t and its skip skips
// t; it then returns false. Namespaces the kernel refuses skip t, unless
// $PINLAB_REQUIRE_NETNS is 1.
func inNetns(t *testing.T) bool {
	t.Helper()
	if netns.Inside() {
		return true
	}
	var out bytes.Buffer // one writer for both: exec.Cmd writes from one goroutine at a time
	code, err := netns.Run(labtest.Context(t, 5*time.Minute), netns.Config{
		Args:   []string{"-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v"},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		if (errors.Is(err, netns.ErrUnavailable) || errors.Is(err, netns.ErrUnsupported)) && os.Getenv(netnstest.RequireEnv) != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Logf("in a private network namespace:\n%s", out.String())
	switch text := out.String(); {
	case code != 0:
		t.Fatalf("failed in a private network namespace (exit %d)", code)
	case strings.Contains(text, "--- SKIP: "+t.Name()):
		t.Skip("skipped in a private network namespace")
	case !strings.Contains(text, "--- PASS: "+t.Name()):
		t.Fatal("did not run in a private network namespace")
	}
	return false
}

// podNetwork is a pod network on pods for t, closed when t ends (after
// the node, whose cleanup runs first); t is skipped when the CNI plugins
// are not built, unless $PINLAB_REQUIRE_NETNS is 1.
func podNetwork(t *testing.T, pods netip.Prefix, local ...netip.Prefix) *podnet.Network {
	t.Helper()
	bin, err := podnet.BinDir()
	if err != nil {
		if os.Getenv(netnstest.RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	n, err := podnet.New(podnet.Config{Bridge: "pinlab-kubelet", Subnet: pods, Local: local, BinDir: bin, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// TestLoadContainerPodNetwork: with Config.PodNetwork, a load client's
// container works inside its pod's own network namespace, as a process in
// the pod would: its DNS queries reach the cluster DNS (in the node's
// namespace) from the pod IP, its calls reach the pricing pod (in a
// namespace of its own) from the pod IP, and its events are served at the
// pod IP, where the node reads them as the kubelet API's port-forward
// does. Without a private namespace (root or user namespaces) or the CNI
// plugins (build/cni/build.sh) it is skipped.
func TestLoadContainerPodNetwork(t *testing.T) {
	if !inNetns(t) {
		return
	}
	pods, nodeIP := netip.MustParsePrefix("10.244.7.0/24"), netip.MustParseAddr("10.244.7.254")
	network := podNetwork(t, pods, netip.PrefixFrom(nodeIP, 32))
	var obs observers
	cc := cluster.Config{PodCIDR: pods, ServiceCIDR: netip.MustParsePrefix("10.96.7.0/24"), DNSIP: netip.MustParseAddr("10.96.7.10")}
	c, k, dns := loadNodeOn(t, cc, Config{NodeIP: nodeIP, PodNetwork: network, Observe: obs.observe})
	if err := c.PodIPs().Reserve(nodeIP); err != nil {
		t.Fatal(err)
	}
	pricing := readyPod(t, c, "pricing", nil)
	const name = "pricing.default.svc.cluster.local"
	dns.Set(name, netip.MustParseAddr(pricing.Status.PodIP))
	p := readyPod(t, c, "orders-0", loadPod("load", "--target", "dns:///"+name+":8471", "--rate", "50", "--duration", "1s",
		"--events-port", "9480", "--name", "orders", "--wait-for-ready"))
	podIP := netip.MustParseAddr(p.Status.PodIP)

	// The kubelet API's port-forward dials the pod's port from the node's
	// namespace (kubeletapi's forwarder).
	tr := &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return loopback.Dialer{Timeout: 5 * time.Second}.DialContext(ctx, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	r := &loadfeed.Reader{URL: "http://" + p.Status.PodIP + ":9480", Token: loadToken, Client: &http.Client{Transport: tr}}
	var calls, conns []loadfeed.Event
	read := func() bool {
		evs, _ := r.Poll(t.Context())
		for _, e := range evs {
			switch e.Kind {
			case loadfeed.KindCall:
				calls = append(calls, e)
			case loadfeed.KindConn:
				conns = append(conns, e)
			}
		}
		m := doneCalls.FindStringSubmatch(logText(t, k, "orders-0", false))
		return m != nil && m[1] == strconv.Itoa(len(calls))
	}
	if err := labtest.Poll(labtest.Context(t, 15*time.Second), 50*time.Millisecond, read); err != nil {
		t.Fatalf("%d calls read (%v); log:\n%s", len(calls), err, logText(t, k, "orders-0", false))
	}
	for _, e := range calls {
		if e.Code != codes.OK || e.Pod != "pricing" {
			t.Fatalf("call %+v, want OK from pod pricing", e)
		}
	}
	if len(calls) < 40 || len(calls) > 51 {
		t.Errorf("%d calls in 1 s at 50/s", len(calls))
	}
	if len(conns) == 0 {
		t.Error("the client reported no connection")
	}
	for _, e := range conns {
		if want := pricing.Status.PodIP + ":8471"; e.Remote != want {
			t.Errorf("connection event %+v, want one to %s", e, want)
		}
	}
	// Both ends of the calls and the DNS queries: from the pod IP.
	peers := obs.of("pricing").Peers("/pricing.v1.Pricing/GetPrice")
	if len(peers) != len(calls) {
		t.Errorf("the pricing pod served %d calls, the client made %d", len(peers), len(calls))
	}
	for _, peer := range peers {
		if peer != podIP {
			t.Fatalf("the pricing pod was called from %v, want the load pod's IP %v", peer, podIP)
		}
	}
	if diff := cmp.Diff([]netip.Addr{podIP}, dns.Sources(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("DNS query sources (-want +got):\n%s", diff)
	}
	if want := "pinlab load orders: dns://" + dns.Addr().String() + "/" + name + ":8471 at 50 calls/s (pick_first) for 1s, events on " + p.Status.PodIP + ":9480"; !strings.Contains(logText(t, k, "orders-0", false), want) {
		t.Errorf("log lacks %q:\n%s", want, logText(t, k, "orders-0", false))
	}
	deletePod(t, c, "orders-0")
	waitGone(t, c, "orders-0")
	if conn, err := (loopback.Dialer{Timeout: time.Second}).DialContext(t.Context(), p.Status.PodIP+":9480"); err == nil {
		conn.Close()
		t.Error("the events endpoint still listens after the pod was deleted")
	}
}
