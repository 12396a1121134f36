package kubetier

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/load/loadtest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// pricing returns a Namespace ns with Deployment pricing (n replicas of
// the lab's gRPC pod, a 2 s preStop sleep), ClusterIP Service pricing and
// headless Service pricing-headless; args are added to the pod's
// ("--no-channelz", say).
func pricing(ns string, n int32, args ...string) []runtime.Object {
	lbl := map[string]string{"app": "pricing"}
	svc := func(name string, headless bool) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: lbl, Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")}}}}
		if headless {
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}
		return s
	}
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		svc("pricing", false), svc("pricing-headless", true),
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(10)),
					Containers: []corev1.Container{{Name: "pricing", Image: "pinlab", Args: append([]string{"pod", "pricing"}, args...),
						Ports:     []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}},
					}}}},
			},
		},
	}
}

// setUp applies pricing(ns, n) through the API server and waits until its
// pods are Ready, the real EndpointSlice controller lists them and
// kube-proxy serves them.
func setUp(t testing.TB, ns string, n int32, args ...string) context.Context {
	t.Helper()
	needTier(t)
	ctx := labtest.Context(t, 3*time.Minute)
	if err := theLab.Apply(ctx, pricing(ns, n, args...)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		theLab.Cluster.Client().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	if err := theLab.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, state(ns))
	}
	return ctx
}

// state describes ns's pods and the Node, for a failure message.
func state(ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	client := theLab.Cluster.Client()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s node %q phase %s IP %s deleting %v conditions %v message %q\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.DeletionTimestamp != nil, p.Status.Conditions, p.Status.Message)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return b.String() + err.Error()
	}
	for _, n := range nodes.Items {
		fmt.Fprintf(&b, "node %s taints %v conditions %v allocatable %v\n", n.Name, n.Spec.Taints, n.Status.Conditions, n.Status.Allocatable)
	}
	return b.String()
}

// readyPods returns the names and IPs of ns's Ready pricing pods, from the
// API server.
func readyPods(t testing.TB, ctx context.Context, ns string) (names, ips []string) {
	t.Helper()
	pods, err := theLab.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=pricing"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if cluster.IsPodReady(&p) && p.DeletionTimestamp == nil {
			names, ips = append(names, p.Name), append(ips, p.Status.PodIP)
		}
	}
	sort.Strings(names)
	sort.Strings(ips)
	return names, ips
}

// waitPods polls the API server every 100 ms until ns's Ready pricing
// pods (names, sorted) satisfy cond, and returns them; it fails t, naming
// when and the pods last seen, if ctx ends first. The lab's own WaitReady
// reads its informer cache, which can lag a write the test made itself.
func waitPods(t testing.TB, ctx context.Context, ns, when string, cond func(ready []string) bool) []string {
	t.Helper()
	var ready []string
	if err := labtest.Poll(ctx, 100*time.Millisecond, func() bool {
		ready, _ = readyPods(t, ctx, ns)
		return cond(ready)
	}); err != nil {
		t.Fatalf("%s: ready pods %v: %v", when, ready, err)
	}
	return ready
}

// clientIP is the pod-range address the tests' clients dial from, taken
// once (lab.AllocateIP: with per-pod namespaces it becomes the node's, so
// it is never given back).
var clientIP = sync.OnceValues(func() (netip.Addr, error) { return theLab.AllocateIP() })

// call runs one client from a pod address for d: 100 calls/s to target
// through the cluster DNS with policy, and returns its tally.
func call(t *testing.T, target, policy string, d time.Duration) *loadtest.Tally {
	t.Helper()
	ip, err := clientIP()
	if err != nil {
		t.Fatal(err)
	}
	var obs loadtest.Tally
	c, err := load.New(load.Config{Name: "order-0", Source: ip, Target: fmt.Sprintf("dns://%s/%s", theLab.DNSAddr(), target), Policy: policy, Rate: 100, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	if err := labtest.RunFor(c.Run, d); err != nil {
		t.Fatal(err)
	}
	if obs.Codes["OK"] < 50 {
		t.Fatalf("%s (%s): calls by code %v: want at least 50 OK", target, policy, obs.Codes)
	}
	return &obs
}

// kubectl runs the control plane's kubectl against the tier.
func kubectl(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestServesThroughRealControlPlane: a Deployment and Services created
// through the API server become Ready pods (the scheduler binds them to
// the lab's Node, the lab's kubelet runs them), the real EndpointSlice
// controller publishes them, the cluster DNS answers for them and
// kube-proxy routes a ClusterIP channel to one of them.
func TestServesThroughRealControlPlane(t *testing.T) {
	ns := "serve"
	ctx := setUp(t, ns, 3)
	names, ips := readyPods(t, ctx, ns)
	if len(names) != 3 {
		t.Fatalf("ready pods %v: want 3", names)
	}
	pods, _ := theLab.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		if p.Spec.NodeName != "pinlab-node" {
			t.Errorf("pod %s bound to node %q, want pinlab-node (the scheduler's binding)", p.Name, p.Spec.NodeName)
		}
	}
	es, err := theLab.Cluster.Client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=pricing"})
	if err != nil {
		t.Fatal(err)
	}
	var sliceIPs []string
	for _, s := range es.Items {
		if s.Labels[discoveryv1.LabelManagedBy] != cluster.ManagedBy {
			t.Errorf("slice %s managed by %q", s.Name, s.Labels[discoveryv1.LabelManagedBy])
		}
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				sliceIPs = append(sliceIPs, ep.Addresses...)
			}
		}
	}
	sort.Strings(sliceIPs)
	if !slices.Equal(sliceIPs, ips) {
		t.Errorf("EndpointSlices list %v ready, pods are at %v", sliceIPs, ips)
	}
	m := new(dns.Msg)
	m.SetQuestion("pricing-headless."+ns+".svc.cluster.local.", dns.TypeA)
	r, _, err := new(dns.Client).Exchange(m, theLab.DNSAddr())
	if err != nil {
		t.Fatal(err)
	}
	var answered []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			answered = append(answered, a.A.String())
		}
	}
	sort.Strings(answered)
	if fmt.Sprint(answered) != fmt.Sprint(ips) {
		t.Errorf("DNS A pricing-headless = %v, want the ready pods %v", answered, ips)
	}
	got := call(t, "pricing."+ns+".svc.cluster.local:8471", "pick_first", 2*time.Second)
	if len(got.Pods) != 1 {
		t.Errorf("ClusterIP pick_first: calls by pod %v, want one pod (kube-proxy picks per connection)", got.Pods)
	}
	got = call(t, "pricing-headless."+ns+".svc.cluster.local:8471", "round_robin", 2*time.Second)
	if len(got.Pods) != 3 {
		t.Errorf("headless round_robin: calls by pod %v, want all 3", got.Pods)
	}
}

// TestKubectlScaleAndRolloutRestart: kubectl scale adds pods that the
// real controllers create and the lab runs; kubectl rollout restart
// replaces every pod through the real Deployment controller, and the
// traffic follows: a new client reaches exactly the new pods.
func TestKubectlScaleAndRolloutRestart(t *testing.T) {
	ns := "kubectl"
	ctx := setUp(t, ns, 2)
	kubectl(t, ctx, "scale", "deployment/pricing", "-n", ns, "--replicas", "4")
	// The ReplicaSet controller creates the new pods after kubectl
	// returns, so the lab may not know of them yet: wait for the API
	// server to list 4 ready pods, not for the lab's current set.
	before := waitPods(t, ctx, ns, "after kubectl scale --replicas 4", func(ready []string) bool { return len(ready) == 4 })
	if err := theLab.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := call(t, "pricing-headless."+ns+".svc.cluster.local:8471", "round_robin", 2*time.Second); len(got.Pods) != 4 {
		t.Errorf("after scale: headless round_robin calls by pod %v, want 4 pods", got.Pods)
	}
	kubectl(t, ctx, "rollout", "restart", "deployment/pricing", "-n", ns)
	out := kubectl(t, ctx, "rollout", "status", "deployment/pricing", "-n", ns, "--timeout", "150s")
	if !strings.Contains(out, "successfully rolled out") {
		t.Fatalf("rollout status: %s", out)
	}
	if err := theLab.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	after := waitPods(t, ctx, ns, "after rollout restart", func(ready []string) bool {
		all, _ := theLab.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return len(ready) == 4 && len(all.Items) == 4 // the old pods are gone
	})
	for _, p := range after {
		if slices.Contains(before, p) {
			t.Errorf("pod %s survived rollout restart (before %v, after %v)", p, before, after)
		}
	}
	got := call(t, "pricing-headless."+ns+".svc.cluster.local:8471", "round_robin", 2*time.Second)
	for p := range got.Pods {
		if !slices.Contains(after, p) {
			t.Errorf("a call reached %s, not one of the new pods %v", p, after)
		}
	}
	if len(got.Pods) != 4 {
		t.Errorf("after rollout: calls by pod %v, want the 4 new pods", got.Pods)
	}
}

// TestGracefulDeletion: a pod deleted through the API server stays,
// terminating, through its preStop sleep (the real EndpointSlice
// controller marks its endpoint terminating and not ready), then the
// lab's kubelet removes it and the real ReplicaSet controller replaces it.
func TestGracefulDeletion(t *testing.T) {
	ns := "graceful"
	ctx := setUp(t, ns, 2)
	names, _ := readyPods(t, ctx, ns)
	victim := names[0]
	pods := theLab.Cluster.Client().CoreV1().Pods(ns)
	deleted := time.Now()
	if err := pods.Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s gone at once; a graceful deletion keeps it through its grace period: %v", victim, err)
	}
	if p.DeletionTimestamp == nil {
		t.Fatalf("pod %s has no deletionTimestamp after delete", victim)
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "pricing"}).String()
	var terminating bool
	labtest.Poll(ctx, 20*time.Millisecond, func() bool {
		ss, err := theLab.Cluster.Client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false
		}
		for _, s := range ss.Items {
			for _, ep := range s.Endpoints {
				if ep.TargetRef != nil && ep.TargetRef.Name == victim && ptr.Deref(ep.Conditions.Terminating, false) && !ptr.Deref(ep.Conditions.Ready, true) {
					terminating = true
				}
			}
		}
		return terminating || time.Since(deleted) > 5*time.Second
	})
	if !terminating {
		t.Errorf("the EndpointSlice never showed %s terminating and not ready during its 2 s preStop", victim)
	}
	var gone time.Duration
	err = labtest.Poll(ctx, 50*time.Millisecond, func() bool {
		_, err := pods.Get(ctx, victim, metav1.GetOptions{})
		gone = time.Since(deleted)
		return err != nil
	})
	if err != nil {
		t.Fatalf("pod %s still there: %v", victim, err)
	}
	if gone < 2*time.Second {
		t.Errorf("pod %s removed %v after delete, before its 2 s preStop ended", victim, gone)
	}
	// The replacement appears when the ReplicaSet controller gets to it:
	// poll the API server rather than the lab's view.
	waitPods(t, ctx, ns, "after the deletion of "+victim, func(ready []string) bool {
		return len(ready) == 2 && !slices.Contains(ready, victim)
	})
}
