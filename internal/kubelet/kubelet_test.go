package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/netns"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMain(m *testing.M) {
	if netns.Inside() {
		// A test run again in a private network namespace (inNetns):
		// the pod and Service ranges are made local there, as on the
		// real control plane tier.
		if err := netns.Setup(netns.PodPrefix, netns.ServicePrefix); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet: %v\n", err)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m)
}

// testRanges hands each test its own pod range inside 127.205.0.0/16,
// outside the ranges labs use, so tests run in parallel and beside a lab.
var testRanges atomic.Int32

// node runs a cluster's API and a kubelet (no controllers) on a fresh
// /24 until the test ends or stop is called.
func node(t *testing.T, cfg Config) (c *cluster.Cluster, k *Kubelet, stop func()) {
	t.Helper()
	return nodeOn(t, cluster.Config{}, cfg)
}

// nodeOn is node on a cluster of cc, whose PodCIDR, if not set, is the
// fresh /24.
func nodeOn(t *testing.T, cc cluster.Config, cfg Config) (c *cluster.Cluster, k *Kubelet, stop func()) {
	t.Helper()
	n := testRanges.Add(1)
	if !cc.PodCIDR.IsValid() {
		cc.PodCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 205, byte(n), 0}), 24)
	}
	cc.Seed = 1
	c, err := cluster.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PodIPs = c.PodIPs()
	k = New(c.Client(), c.Factory(), cfg)
	ctx, cancel := context.WithCancel(context.Background())
	c.Factory().Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := k.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			c.Factory().Shutdown()
		})
	}
	t.Cleanup(stop)
	return c, k, stop
}

func createPod(t *testing.T, c *cluster.Cluster, name string, mod func(*corev1.Pod)) {
	t.Helper()
	grace := int64(5)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{Name: "app", Image: "pinlab", Args: []string{"pod", "pricing"},
			Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}}}}}}
	if mod != nil {
		mod(p)
	}
	if _, err := c.Client().CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitPod(t *testing.T, c *cluster.Cluster, name, what string, cond func(*corev1.Pod, error) bool) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	var err error
	held := func() bool {
		p, err = c.Client().CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		return cond(p, err)
	}
	if labtest.Poll(labtest.Context(t, 10*time.Second), 10*time.Millisecond, held) != nil {
		t.Fatalf("pod %s: timed out waiting for %s; last: %+v %v", name, what, p.Status, err)
	}
	return p
}

func TestPodLifecycle(t *testing.T) {
	c, _, _ := node(t, Config{})
	createPod(t, c, "p1", nil)
	p := waitPod(t, c, "p1", "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
	if p.Status.Phase != corev1.PodRunning || !c.PodIPs().Prefix().Contains(netip.MustParseAddr(p.Status.PodIP)) {
		t.Fatalf("status %s with IP %q; want Running with a pod IP", p.Status.Phase, p.Status.PodIP)
	}
	addr := p.Status.PodIP + ":8471"
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("pod server not reachable at %s: %v", addr, err)
	}
	conn.Close()

	if err := c.Client().CoreV1().Pods("default").Delete(context.Background(), "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "p1", "removal", func(_ *corev1.Pod, err error) bool { return apierrors.IsNotFound(err) })
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Errorf("%s still accepts connections after the pod was deleted", addr)
	}
	if n := c.PodIPs().InUse(); n != 0 {
		t.Errorf("%d pod IPs still allocated after deletion, want 0", n)
	}
}

func TestPodsThatCannotRun(t *testing.T) {
	tests := []struct {
		name   string
		mod    func(*corev1.Pod)
		reason string
	}{
		{name: "foreign image", mod: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx:1.27" }, reason: `ErrImagePull: Failed to pull image "nginx:1.27"`},
		{name: "a digest the node does not hold", mod: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example/acme/lab@" + otherDigest },
			reason: `ErrImagePull: Failed to pull image "registry.example/acme/lab@` + otherDigest + `": pinlab's node runs images named pinlab and, by digest, the pinlab image it was given (digests: 1)`},
		{name: "bad args", mod: func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"pod", "inventory"} }, reason: `unknown workload "inventory"`},
		{name: "failing readiness probe", mod: func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
				ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9)}}}
		}, reason: "readiness probe failed"},
	}
	c, _, _ := node(t, Config{Images: []string{heldDigest}})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprint("bad-", i)
			createPod(t, c, name, tt.mod)
			p := waitPod(t, c, name, "a reason", func(p *corev1.Pod, err error) bool {
				if err != nil {
					return false
				}
				msg := p.Status.Message
				for _, cs := range p.Status.ContainerStatuses {
					if cs.State.Waiting != nil {
						msg += cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
					}
				}
				return strings.Contains(msg, tt.reason)
			})
			if cluster.IsPodReady(p) {
				t.Error("pod is Ready, want not ready")
			}
			if err := c.Client().CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitPod(t, c, name, "removal", func(_ *corev1.Pod, err error) bool { return apierrors.IsNotFound(err) })
		})
	}
}

// Digests of images: one the node holds as the pinlab image, one not.
const (
	heldDigest  = "sha256:792869e7085fdfdd1375ae148e57c2dad7871bbe1931998d8583aeaae7c5de52"
	otherDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"
)

// TestImageByDigest: a pod whose image is pinned to a digest the node
// holds runs as image pinlab does, whatever its repository.
func TestImageByDigest(t *testing.T) {
	c, _, _ := node(t, Config{Images: []string{otherDigest, heldDigest}})
	createPod(t, c, "by-digest", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "127.0.0.1:5000/acme/grpc-lab@" + heldDigest })
	p := waitPod(t, c, "by-digest", "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
	conn, err := net.Dial("tcp", p.Status.PodIP+":8471")
	if err != nil {
		t.Fatalf("the pod's server is not reachable: %v", err)
	}
	conn.Close()
}

func TestSetReadyKeepsServing(t *testing.T) {
	c, k, _ := node(t, Config{})
	createPod(t, c, "p2", nil)
	p := waitPod(t, c, "p2", "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
	if err := k.SetReady("default", "p2", false); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "p2", "not Ready", func(p *corev1.Pod, err error) bool { return err == nil && !cluster.IsPodReady(p) })
	conn, err := net.Dial("tcp", p.Status.PodIP+":8471")
	if err != nil {
		t.Fatalf("a not-ready pod stopped serving: %v", err)
	}
	conn.Close()
	if err := k.SetReady("default", "p2", true); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "p2", "Ready again", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
	if err := k.SetReady("default", "nope", false); !errors.Is(err, ErrNoPod) {
		t.Errorf("SetReady on a missing pod: %v, want ErrNoPod", err)
	}
}
