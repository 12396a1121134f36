package runner_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkKubernetesResolverScaleOut measures, in a lab, how soon a pod
// added to a Deployment gets calls from a round_robin client on the
// "kubernetes" resolver (1000 calls/s): from the pod's Ready condition (as
// the API's watchers see it) to its first served call, and to its first
// call in the first 100 ms in which it served 90% of a fair share. Each
// iteration adds one pod to the 4 the lab starts with.
func BenchmarkKubernetesResolverScaleOut(b *testing.B) {
	const rate = 1000
	ctx := labtest.Context(b, 5*time.Minute)
	l, err := lab.Start(ctx, lab.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	replicas := int32(4)
	if err := l.Apply(ctx, pricingObjects(replicas)); err != nil {
		b.Fatal(err)
	}
	if err := l.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	readyAt := watchReady(b, l)
	ip, err := l.AllocateIP()
	if err != nil {
		b.Fatal(err)
	}
	var calls callLog
	c, err := load.New(load.Config{
		Name: "order-0", Source: ip, Target: "kubernetes://shop/pricing:grpc", Policy: "round_robin", Rate: rate,
		Resolver: load.ResolverKubernetes, Kubernetes: l.Cluster.Client(), Observer: &calls,
	})
	if err != nil {
		b.Fatal(err)
	}
	c.Connect()
	stop := labtest.Run(b, c.Run)
	defer stop()

	var first, fair time.Duration
	for b.Loop() {
		known := readyAt.names()
		replicas++
		if err := l.Scale(ctx, "Deployment", "shop", "pricing", replicas); err != nil {
			b.Fatal(err)
		}
		var pod string
		labtest.WaitFor(b, time.Minute, "a new pod Ready", func() bool {
			for _, n := range readyAt.names() {
				if !slices.Contains(known, n) {
					pod = n
					return true
				}
			}
			return false
		})
		ready := readyAt.get(pod)
		var f, s time.Time
		labtest.WaitFor(b, time.Minute, "the new pod's fair share", func() bool {
			f, s = calls.share(pod, ready, int(replicas), rate)
			return !s.IsZero()
		})
		first += f.Sub(ready)
		fair += s.Sub(ready)
	}
	b.ReportMetric(float64(first.Microseconds())/1e3/float64(b.N), "ms-to-first-call")
	b.ReportMetric(float64(fair.Microseconds())/1e3/float64(b.N), "ms-to-90%-share")
}

// pricingObjects is Namespace shop, Deployment pricing (replicas pods,
// Ready when their gRPC server answers, probed every second) and Service
// pricing on port grpc.
func pricingObjects(replicas int32) []runtime.Object {
	lbl := map[string]string{"app": "pricing"}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471}}, PeriodSeconds: 1}
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"},
			Spec: corev1.ServiceSpec{Selector: lbl, Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")}}}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pricing", Image: "pinlab", Args: []string{"pod", "pricing"}, ReadinessProbe: probe,
						Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}}}}}},
			},
		},
	}
}

// readyTimes holds when each pod's Ready condition turned true, as the
// lab's informers saw it.
type readyTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

func watchReady(b *testing.B, l *lab.Lab) *readyTimes {
	rt := &readyTimes{at: map[string]time.Time{}}
	note := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && podReady(p) {
			rt.mu.Lock()
			if _, seen := rt.at[p.Name]; !seen {
				rt.at[p.Name] = time.Now()
			}
			rt.mu.Unlock()
		}
	}
	if err := l.WatchPods(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) }}); err != nil {
		b.Fatal(err)
	}
	return rt
}

func (rt *readyTimes) names() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []string
	for n := range rt.at {
		out = append(out, n)
	}
	return out
}

func (rt *readyTimes) get(name string) time.Time {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.at[name]
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// callLog records when each successful call finished and which pod
// served it.
type callLog struct {
	mu    sync.Mutex
	calls []servedCall
}

type servedCall struct {
	at  time.Time
	pod string
}

func (c *callLog) Called(r load.Result) {
	if r.Code != codes.OK {
		return
	}
	c.mu.Lock()
	c.calls = append(c.calls, servedCall{at: r.Due.Add(r.Latency), pod: r.Pod})
	c.mu.Unlock()
}

func (c *callLog) Conn(load.ConnEvent) {}

// share returns when pod first served a call after since, and its first
// call in the first 100 ms in which it served at least 90% of a fair share
// (1/pods of rate), as stats.Rebalance counts (with 1 s spans); zero times
// until they happened.
func (c *callLog) share(pod string, since time.Time, pods, rate int) (first, fair time.Time) {
	const span = 100 * time.Millisecond
	need := 0.9 * float64(rate) * span.Seconds() / float64(pods)
	c.mu.Lock()
	defer c.mu.Unlock()
	var mine []time.Time
	for _, k := range c.calls {
		if k.pod == pod && k.at.After(since) {
			mine = append(mine, k.at)
		}
	}
	slices.SortFunc(mine, func(a, b time.Time) int { return a.Compare(b) })
	if len(mine) == 0 {
		return
	}
	first = mine[0]
	for i := range mine {
		j := i
		for j < len(mine) && mine[j].Sub(mine[i]) < span {
			j++
		}
		if float64(j-i) >= need {
			return first, mine[i]
		}
	}
	return first, time.Time{}
}
