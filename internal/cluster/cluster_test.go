package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startCluster runs a cluster with its controllers until the test ends.
func startCluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := New(Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctrls := NewControllers(c)
	ctx, cancel := context.WithCancel(context.Background())
	c.Factory().Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, ctrls)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		c.Factory().Shutdown()
	})
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	return c
}

func mustCreate(t *testing.T, c *Cluster, obj any) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = c.Client().CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = c.Client().CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.Deployment:
		_, err = c.Client().AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		t.Fatalf("mustCreate: unsupported %T", obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last state: %s", what, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "pinlab", Args: []string{"pod", "pricing"},
					Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}},
				}}},
			},
		},
	}
}

func service(name string, headless bool) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "pricing"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")}},
		},
	}
	if headless {
		s.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return s
}

func listPods(t *testing.T, c *Cluster) []corev1.Pod {
	t.Helper()
	l, err := c.Client().CoreV1().Pods("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// runPods plays a minimal kubelet: gives every pod without an IP one and
// marks it Ready.
func runPods(t *testing.T, c *Cluster) {
	t.Helper()
	for _, p := range listPods(t, c) {
		if p.Status.PodIP != "" {
			continue
		}
		ip, err := c.PodIPs().Allocate()
		if err != nil {
			t.Fatal(err)
		}
		p.Status.PodIP = ip.String()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := c.Client().CoreV1().Pods("shop").UpdateStatus(context.Background(), &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func slicesOf(t *testing.T, c *Cluster, svc string) []discoveryv1.EndpointSlice {
	t.Helper()
	l, err := c.Client().DiscoveryV1().EndpointSlices("shop").List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// readyAddrs returns the sorted ready addresses across all slices.
func readyAddrs(slices []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestDeploymentScaleAndEndpointSlices(t *testing.T) {
	c := startCluster(t)
	mustCreate(t, c, service("pricing", false))
	mustCreate(t, c, service("pricing-headless", true))
	mustCreate(t, c, deployment("pricing", 2))

	eventually(t, "2 pods", func() (bool, string) {
		n := len(listPods(t, c))
		return n == 2, fmt.Sprint(n, " pods")
	})
	runPods(t, c)
	for _, svc := range []string{"pricing", "pricing-headless"} {
		eventually(t, svc+" slices with 2 ready endpoints", func() (bool, string) {
			got := readyAddrs(slicesOf(t, c, svc))
			return len(got) == 2, fmt.Sprint(got)
		})
	}
	s := slicesOf(t, c, "pricing-headless")[0]
	if _, ok := s.Labels[HeadlessLabel]; !ok {
		t.Errorf("headless slice labels %v lack %s", s.Labels, HeadlessLabel)
	}
	if got := *s.Ports[0].Port; got != 8471 {
		t.Errorf("named targetPort resolved to %d, want 8471", got)
	}

	d, err := c.Client().AppsV1().Deployments("shop").Get(context.Background(), "pricing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ten := int32(10)
	d.Spec.Replicas = &ten
	if _, err := c.Client().AppsV1().Deployments("shop").Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "10 pods", func() (bool, string) {
		n := len(listPods(t, c))
		return n == 10, fmt.Sprint(n, " pods")
	})
	runPods(t, c)
	eventually(t, "10 ready endpoints", func() (bool, string) {
		got := readyAddrs(slicesOf(t, c, "pricing"))
		return len(got) == 10, fmt.Sprint(got)
	})
	eventually(t, "deployment status", func() (bool, string) {
		d, _ := c.Client().AppsV1().Deployments("shop").Get(context.Background(), "pricing", metav1.GetOptions{})
		return d.Status.ReadyReplicas == 10 && d.Status.Replicas == 10, fmt.Sprintf("%+v", d.Status)
	})
	// The scale-out must not have overshot: exactly 10 pods were ever made.
	if n := c.PodIPs().InUse(); n != 10 {
		t.Errorf("%d pod IPs handed out, want 10", n)
	}

	// Scale down: victims terminate gracefully (deletionTimestamp set, still
	// listed, serving but not ready) rather than vanishing.
	d, _ = c.Client().AppsV1().Deployments("shop").Get(context.Background(), "pricing", metav1.GetOptions{})
	three := int32(3)
	d.Spec.Replicas = &three
	if _, err := c.Client().AppsV1().Deployments("shop").Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "7 terminating endpoints", func() (bool, string) {
		var ready, term int
		for _, s := range slicesOf(t, c, "pricing") {
			for _, ep := range s.Endpoints {
				if *ep.Conditions.Terminating && *ep.Conditions.Serving && !*ep.Conditions.Ready {
					term++
				}
				if *ep.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == 3 && term == 7, fmt.Sprintf("ready=%d terminating=%d", ready, term)
	})
}

func TestEndpointConditions(t *testing.T) {
	now := metav1.Now()
	pod := func(ready, deleting bool) *corev1.Pod {
		p := &corev1.Pod{}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	type conds struct{ Ready, Serving, Terminating bool }
	// The rows of k8s-dns.md §3's table.
	tests := []struct {
		name            string
		pod             *corev1.Pod
		publishNotReady bool
		want            conds
	}{
		{name: "running and ready", pod: pod(true, false), want: conds{true, true, false}},
		{name: "not ready", pod: pod(false, false), want: conds{false, false, false}},
		{name: "not ready, publishNotReadyAddresses", pod: pod(false, false), publishNotReady: true, want: conds{true, false, false}},
		{name: "terminating, still ready", pod: pod(true, true), want: conds{false, true, true}},
		{name: "terminating, not ready", pod: pod(false, true), want: conds{false, false, true}},
		{name: "terminating, publishNotReadyAddresses", pod: pod(true, true), publishNotReady: true, want: conds{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := EndpointConditions(tt.pod, tt.publishNotReady)
			got := conds{*c.Ready, *c.Serving, *c.Terminating}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSlicesHoldAtMost100Endpoints(t *testing.T) {
	svc := service("big", true)
	var pods []*corev1.Pod
	for i := range 250 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%03d", i), Namespace: "shop", UID: types.UID(fmt.Sprint("u", i))}}
		p.Spec.Containers = []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471, Protocol: corev1.ProtocolTCP}}}}
		p.Status.PodIP = fmt.Sprintf("127.244.%d.%d", i/250, i%250+2)
		pods = append(pods, p)
	}
	svc.Spec.Ports[0].Protocol = corev1.ProtocolTCP
	plan := reconcileSlices(svc, nil, desiredEndpoints(svc, pods))
	var sizes []int
	for _, s := range plan.create {
		sizes = append(sizes, len(s.Endpoints))
	}
	if diff := cmp.Diff([]int{100, 100, 50}, sizes); diff != "" {
		t.Fatalf("slice sizes (-want +got):\n%s", diff)
	}
	// Removing one endpoint from the first slice updates only that slice.
	existing := plan.create
	for i, s := range existing {
		s.Name = fmt.Sprint("big-", i)
	}
	plan = reconcileSlices(svc, existing, desiredEndpoints(svc, pods[1:]))
	if len(plan.update) != 1 || len(plan.create) != 0 || len(plan.remove) != 0 || len(plan.keep) != 2 {
		t.Fatalf("after removing one pod: %d updates, %d creates, %d removes, %d kept; want 1, 0, 0, 2",
			len(plan.update), len(plan.create), len(plan.remove), len(plan.keep))
	}
}

func TestServiceAdmission(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	svcs := c.Client().CoreV1().Services("shop")

	got, err := svcs.Create(ctx, service("a", false), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr(got.Spec.ClusterIP)
	if !DefaultServiceCIDR.Contains(ip) || ip == c.DNSIP() {
		t.Errorf("ClusterIP %v: want a fresh address in %v", ip, DefaultServiceCIDR)
	}
	if got.Spec.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("port protocol not defaulted: %q", got.Spec.Ports[0].Protocol)
	}
	h, err := svcs.Create(ctx, service("h", true), metav1.CreateOptions{})
	if err != nil || h.Spec.ClusterIP != "None" {
		t.Errorf("headless create = %v, %v; want clusterIP None", h.Spec.ClusterIP, err)
	}

	tests := []struct {
		name string
		svc  *corev1.Service
		ns   string
	}{
		{name: "taken ClusterIP", svc: func() *corev1.Service { s := service("b", false); s.Spec.ClusterIP = ip.String(); return s }()},
		{name: "ClusterIP outside range", svc: func() *corev1.Service { s := service("b", false); s.Spec.ClusterIP = "10.0.0.1"; return s }()},
		{name: "bad port", svc: func() *corev1.Service { s := service("b", false); s.Spec.Ports[0].Port = 70000; return s }()},
		{name: "NodePort", svc: func() *corev1.Service { s := service("b", false); s.Spec.Type = corev1.ServiceTypeNodePort; return s }()},
		{name: "missing namespace", svc: func() *corev1.Service { s := service("b", false); s.Namespace = "nope"; return s }(), ns: "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := tt.ns
			if ns == "" {
				ns = "shop"
			}
			_, err := c.Client().CoreV1().Services(ns).Create(ctx, tt.svc, metav1.CreateOptions{})
			if err == nil {
				t.Fatal("create succeeded, want an error")
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsNotFound(err) {
				t.Errorf("error %v is neither Invalid nor NotFound", err)
			}
		})
	}
}
