package kubeproxytier

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
)

// kubeproxyConfig is the real kube-proxy's configuration for a lab with
// dataplane dp: the control plane's binaries and kubeconfig, a log in the
// tier's state directory.
func kubeproxyConfig(dp lab.Dataplane) kubeproxy.Config {
	return kubeproxy.Config{BinDir: cp.BinDir(), Kubeconfig: cp.KubeProxyKubeconfig(), Log: filepath.Join(stateD, "kube-proxy-"+string(dp)+".log")}
}

// pricing returns a Namespace ns with Deployment pricing (n replicas of
// the lab's gRPC pod) and its ClusterIP Service pricing.
func pricing(ns string, n int32) []runtime.Object {
	lbl := map[string]string{"app": "pricing"}
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: lbl, Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")}}}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pricing", Image: "pinlab", Args: []string{"pod", "pricing"},
						Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}}}}}},
			},
		},
	}
}

// setUp applies pricing(ns, n) and waits until its pods are Ready, the
// real EndpointSlice controller lists them and the kernel's rules (read
// back from kube-proxy's table) DNAT the ClusterIP to each of them.
func setUp(t *testing.T, ns string, n int32) context.Context {
	t.Helper()
	ctx := labtest.Context(t, 3*time.Minute)
	if err := theLab.Apply(ctx, pricing(ns, n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	if err := theLab.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// readyPods returns ns's Ready pricing pods, name to IP.
func readyPods(t *testing.T, ctx context.Context, ns string) map[string]string {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=pricing"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if cluster.IsPodReady(&p) && p.DeletionTimestamp == nil {
			out[p.Name] = p.Status.PodIP
		}
	}
	return out
}

// tally counts a client's calls per pod, in two phases (before and after
// a change the test makes while the client runs).
type tally struct {
	after atomic.Bool
	mu    sync.Mutex
	pods  [2]map[string]int
	codes map[string]int
}

func (c *tally) Called(r load.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.codes == nil {
		c.codes, c.pods = map[string]int{}, [2]map[string]int{{}, {}}
	}
	c.codes[r.Code.String()]++
	if r.Pod != "" {
		phase := 0
		if c.after.Load() {
			phase = 1
		}
		c.pods[phase][r.Pod]++
	}
}

func (c *tally) Conn(load.ConnEvent) {}

// calls returns the calls per pod of a phase, and the codes.
func (c *tally) calls(phase int) (map[string]int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.pods[phase] {
		out[k] = v
	}
	codes := map[string]int{}
	for k, v := range c.codes {
		codes[k] = v
	}
	return out, codes
}

// channel is one gRPC ClusterIP channel from its own pod address.
type channel struct {
	ip   netip.Addr
	obs  *tally
	stop func() error
}

// startChannels starts n clients, each from its own pod address, calling
// pricing.NS.svc.cluster.local:8471 (the ClusterIP, through the cluster
// DNS) with pick_first at 50 calls/s; stop them with stopChannels.
func startChannels(t *testing.T, ns string, n int) []*channel {
	t.Helper()
	var chs []*channel
	for i := range n {
		ip, err := theLab.AllocateIP()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { theLab.Cluster.PodIPs().Release(ip) })
		obs := &tally{}
		c, err := load.New(load.Config{Name: fmt.Sprintf("client-%d", i), Source: ip, Rate: 50, Policy: "pick_first", Observer: obs,
			Target: fmt.Sprintf("dns://%s/pricing.%s.svc.cluster.local:8471", theLab.DNSAddr(), ns)})
		if err != nil {
			t.Fatal(err)
		}
		stop := labtest.Run(t, c.Run)
		chs = append(chs, &channel{ip: ip, obs: obs, stop: stop})
	}
	return chs
}

// waitCalls waits until every channel has made at least n OK calls.
func waitCalls(t *testing.T, ctx context.Context, chs []*channel, n int) {
	t.Helper()
	err := labtest.Poll(ctx, 50*time.Millisecond, func() bool {
		for _, c := range chs {
			if _, codes := c.obs.calls(0); codes["OK"] < n {
				return false
			}
		}
		return true
	})
	if err != nil {
		var b strings.Builder
		for _, c := range chs {
			_, codes := c.obs.calls(0)
			fmt.Fprintf(&b, " %s: %v;", c.ip, codes)
		}
		t.Fatalf("channels did not make %d OK calls each:%s %v", n, b.String(), err)
	}
}

// only returns the single pod a channel called, or fails.
func only(t *testing.T, c *channel, calls map[string]int) string {
	t.Helper()
	if len(calls) != 1 {
		t.Fatalf("channel from %s called %d pods %v; one ClusterIP channel should reach exactly one", c.ip, len(calls), calls)
	}
	for p := range calls {
		return p
	}
	return ""
}

// TestChannelPinsToOnePod: with 4 pods ready behind the ClusterIP, one
// gRPC channel from a pod address sends every call to one pod (the kernel
// DNATed its one connection once), and the lab's conntrack view reports
// that connection: from the channel's address, to the ClusterIP, DNATed
// to that pod.
func TestChannelPinsToOnePod(t *testing.T) {
	useLab(t, lab.DataplaneKubeProxyNFTables)
	ns := "pin"
	ctx := setUp(t, ns, 4)
	pods := readyPods(t, ctx, ns)
	if len(pods) != 4 {
		t.Fatalf("ready pods %v, want 4", pods)
	}
	chs := startChannels(t, ns, 1)
	waitCalls(t, ctx, chs, 100)
	if err := chs[0].stop(); err != nil {
		t.Fatal(err)
	}
	calls, codes := chs[0].obs.calls(0)
	pod := only(t, chs[0], calls)
	if codes["OK"] != calls[pod] {
		t.Errorf("calls by code %v, by pod %v: every call should be OK", codes, calls)
	}
	svc, err := theLab.Service(ns, "pricing")
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 8471)
	want := netip.AddrPortFrom(netip.MustParseAddr(pods[pod]), 8471)
	// conntrack -E reports within milliseconds; 15 s is ample.
	seen, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var opened []string
	err = labtest.Poll(seen, 50*time.Millisecond, func() bool {
		o, _ := conns.from(chs[0].ip)
		opened = nil
		for _, c := range o {
			opened = append(opened, fmt.Sprintf("%v -> %v -> %v (%s)", c.Client, c.VIP, c.Endpoint, c.Pod))
		}
		return len(o) == 1 && o[0].VIP == vip && o[0].Endpoint == want && o[0].Pod == pod
	})
	if err != nil {
		t.Fatalf("conntrack view of %s: %v; want one connection -> %v -> %v (%s): %v", chs[0].ip, opened, vip, want, pod, err)
	}
}

// TestChannelsSpreadOverPods: 12 channels, each from its own pod address,
// each pinned to one pod, together reach more than one of the 3 pods (the
// kernel picks uniformly per connection: all 12 on one pod has
// probability 3^-11).
func TestChannelsSpreadOverPods(t *testing.T) {
	useLab(t, lab.DataplaneKubeProxyNFTables)
	ns := "spread"
	ctx := setUp(t, ns, 3)
	chs := startChannels(t, ns, 12)
	waitCalls(t, ctx, chs, 20)
	reached := map[string]int{}
	for _, c := range chs {
		if err := c.stop(); err != nil {
			t.Fatal(err)
		}
		calls, _ := c.obs.calls(0)
		reached[only(t, c, calls)]++
	}
	if len(reached) < 2 {
		t.Errorf("12 channels, pods they pinned to: %v; want more than one pod", reached)
	}
}

// TestScaleOutLeavesNewPodsIdle: 4 channels hold their connections to a
// Deployment of 2 pods while it scales to 5: once the kernel DNATs the
// ClusterIP to all 5, the channels still call only their first pod, and
// the 3 new pods get none of their calls.
func TestScaleOutLeavesNewPodsIdle(t *testing.T) {
	useLab(t, lab.DataplaneKubeProxyNFTables)
	ns := "scale"
	ctx := setUp(t, ns, 2)
	before := readyPods(t, ctx, ns)
	chs := startChannels(t, ns, 4)
	waitCalls(t, ctx, chs, 20)
	first := map[*channel]string{}
	for _, c := range chs {
		calls, _ := c.obs.calls(0)
		first[c] = only(t, c, calls)
	}
	if err := theLab.Scale(ctx, "Deployment", ns, "pricing", 5); err != nil {
		t.Fatal(err)
	}
	if err := theLab.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	after := readyPods(t, ctx, ns)
	if len(after) != 5 {
		t.Fatalf("ready pods after the scale-out %v, want 5", after)
	}
	for _, c := range chs {
		c.obs.after.Store(true)
	}
	err := labtest.Poll(ctx, 50*time.Millisecond, func() bool {
		for _, c := range chs {
			if calls, _ := c.obs.calls(1); calls[first[c]] < 50 {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("channels did not keep calling after the scale-out: %v", err)
	}
	var added []string
	for name := range after {
		if _, ok := before[name]; !ok {
			added = append(added, name)
		}
	}
	sort.Strings(added)
	for _, c := range chs {
		if err := c.stop(); err != nil {
			t.Fatal(err)
		}
		calls, _ := c.obs.calls(1)
		if len(calls) != 1 || calls[first[c]] == 0 {
			t.Errorf("channel from %s after the scale-out called %v; want only its first pod %s", c.ip, calls, first[c])
		}
		for _, p := range added {
			if calls[p] != 0 {
				t.Errorf("channel from %s called added pod %s %d times", c.ip, p, calls[p])
			}
		}
	}
}

// TestIPTablesRoutesClusterIP replaces the tier's lab with one whose
// dataplane is the real kube-proxy in iptables mode (Debian's iptables,
// its nf_tables backend): a channel from a pod address reaches a pod
// through the ClusterIP, and the kernel's KUBE-SVC chain lists both pods.
func TestIPTablesRoutesClusterIP(t *testing.T) {
	useLab(t, lab.DataplaneKubeProxyIPTables)
	ns := "iptables"
	ctx := setUp(t, ns, 2)
	pods := readyPods(t, ctx, ns)
	chs := startChannels(t, ns, 1)
	waitCalls(t, ctx, chs, 50)
	if err := chs[0].stop(); err != nil {
		t.Fatal(err)
	}
	calls, _ := chs[0].obs.calls(0)
	if _, ok := pods[only(t, chs[0], calls)]; !ok {
		t.Errorf("the channel called %v, not one of the ready pods %v", calls, pods)
	}
	if got := theLab.Dataplane(); got != lab.DataplaneKubeProxyIPTables {
		t.Errorf("lab dataplane %s, want %s", got, lab.DataplaneKubeProxyIPTables)
	}
}
