package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/pinlab/pinlab/internal/loopback"
)

// RequireEnv, set to 1, makes the tests that need the binaries fail
// instead of skipping when BinDir finds none (as CI does).
const RequireEnv = "PINLAB_REQUIRE_CONTROL_PLANE"

// binDir returns BinDir() or skips t (fails it under RequireEnv).
func binDir(t testing.TB) string {
	t.Helper()
	d, err := BinDir()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return d
}

// TestControlPlane starts the real control plane and drives what the lab
// needs of it: the scheduler binds a Deployment's pods to a hand-made
// Node, and the EndpointSlice controller publishes them once their status
// says Running and Ready at pod addresses.
func TestControlPlane(t *testing.T) {
	bin := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Config{BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	pids := cp.PIDs()
	defer func() {
		start := time.Now()
		if err := cp.Close(); err != nil {
			t.Error(err)
		}
		t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
		for name, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("%s (pid %d) still exists after Close: kill 0 = %v", name, pid, err)
			}
		}
	}()
	tm := cp.Timings()
	t.Logf("start to /readyz %v, to every component healthy %v", tm.APIServerReady.Round(time.Millisecond), tm.Ready.Round(time.Millisecond))
	logRSS(t, cp, "idle")
	if len(pids) != 4 {
		t.Fatalf("PIDs() = %v, want the 4 components", pids)
	}

	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	const ns, node = "pinlab-test", "node-1"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createNode(ctx, t, cs, node)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "pinlab/web",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if svc, err = cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !DefaultServiceCIDR.Contains(mustAddr(t, svc.Spec.ClusterIP)) {
		t.Errorf("ClusterIP %s outside the Service CIDR %s", svc.Spec.ClusterIP, DefaultServiceCIDR)
	}

	var pods []corev1.Pod
	waitFor(ctx, t, "the scheduler to bind 2 pods to "+node, func() (bool, string) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods = l.Items
		bound := 0
		for _, p := range pods {
			if p.Spec.NodeName == node {
				bound++
			}
		}
		return bound == 2 && len(pods) == 2, fmt.Sprintf("%d pods, %d bound", len(pods), bound)
	})
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	ips := []string{"10.244.0.2", "10.244.0.3"}
	for i := range pods {
		markRunning(ctx, t, cs, &pods[i], ips[i])
	}
	waitFor(ctx, t, "the EndpointSlice controller to publish both pods ready", func() (bool, string) {
		l, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err.Error()
		}
		var ready []string
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready = append(ready, e.Addresses...)
				}
			}
		}
		slices.Sort(ready)
		return slices.Equal(ready, ips), fmt.Sprintf("ready addresses %v", ready)
	})
	logRSS(t, cp, "with 2 pods")
	checkKubectl(ctx, t, cp, bin)

	// A component that dies is reported.
	if err := syscall.Kill(pids[schedulerName], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cp.Done():
		if err := cp.Err(); err == nil || !strings.Contains(err.Error(), "kube-scheduler exited (signal: killed) while running") {
			t.Errorf("Err() = %v, want the scheduler's exit", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Done() not closed 10 s after the scheduler was killed")
	}
}

// createNode registers a Ready node with capacity, as a kubelet does, and
// its Lease.
func createNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// node-lifecycle-controller writes a new Node within moments (its
	// taints): a status write on the created copy may meet a 409, as the
	// kubelet's does; write it on the Node read afresh.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status = corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.255.1"}},
		}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: now.Time},
		},
	}
	if _, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// markRunning writes pod's status as a kubelet would once its container
// runs and is ready at ip.
func markRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, ip string) {
	t.Helper()
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.HostIP = "10.244.255.1"
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", pod.Name, err)
	}
}

// waitFor polls check every 50 ms until it is true, failing t after 60 s
// (or when ctx ends) with check's last word.
func waitFor(ctx context.Context, t *testing.T, what string, check func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := check()
		if ok {
			t.Logf("waited %v for %s", time.Since(start).Round(time.Millisecond), what)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %s)", what, ctx.Err(), last)
		case <-deadline.C:
			t.Fatalf("waiting for %s: 60 s passed (last: %s)", what, last)
		case <-tick.C:
		}
	}
}

// logRSS logs each component's resident set size and their sum.
func logRSS(t *testing.T, cp *ControlPlane, when string) {
	t.Helper()
	rss, err := cp.RSS()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var parts []string
	for _, name := range []string{etcdName, apiserverName, kcmName, schedulerName} {
		total += rss[name]
		parts = append(parts, fmt.Sprintf("%s %d MB", name, rss[name]>>20))
	}
	t.Logf("RSS %s: %s; total %d MB", when, strings.Join(parts, ", "), total>>20)
}

// BenchmarkStart starts and stops the control plane; it reports the
// milliseconds from Start to /readyz and to every component healthy, and
// the components' total RSS once ready.
func BenchmarkStart(b *testing.B) {
	bin := binDir(b)
	var readyz, ready, rssMB float64
	for b.Loop() {
		cp, err := Start(context.Background(), Config{BinDir: bin})
		if err != nil {
			b.Fatal(err)
		}
		tm := cp.Timings()
		readyz += float64(tm.APIServerReady.Milliseconds())
		ready += float64(tm.Ready.Milliseconds())
		rss, err := cp.RSS()
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range rss {
			rssMB += float64(n >> 20)
		}
		if err := cp.Close(); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(readyz/n, "ms-to-readyz")
	b.ReportMetric(ready/n, "ms-to-ready")
	b.ReportMetric(rssMB/n, "MB-rss")
}

// checkKubectl runs the built kubectl with a kubeconfig from
// WriteKubeconfig whose server is a TCP forwarder on another port, as the
// lab's host-side forwarder is: TLS must still verify.
func checkKubectl(ctx context.Context, t *testing.T, cp *ControlPlane, bin string) {
	t.Helper()
	ln, err := loopback.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	target := strings.TrimPrefix(cp.URL(), "https://")
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { forward(ctx, c, target) })
		}
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, "https://"+ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl through a forwarder: %v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "node/node-1" {
		t.Errorf("kubectl get nodes -o name = %q, want node/node-1", got)
	}
}

// forward copies between c and a new connection to target until either
// side closes.
func forward(ctx context.Context, c net.Conn, target string) {
	defer c.Close()
	u, err := loopback.Dialer{}.DialContext(ctx, target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}
