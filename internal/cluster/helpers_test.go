package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// kubelet plays the lab's kubelet for namespace shop until the test ends:
// every Pending pod becomes Running, Ready if ready says so (nil: always),
// with the Ready condition's lastTransitionTime set to now; every
// terminating pod is removed once it has been terminating for linger.
type kubelet struct {
	ready  func(*corev1.Pod) bool
	linger time.Duration
}

func (k kubelet) start(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := k.step(ctx, c); err != nil && ctx.Err() == nil {
				t.Errorf("kubelet: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func (k kubelet) step(ctx context.Context, c *Cluster) error {
	pods, err := c.Client().CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.DeletionTimestamp != nil:
			if time.Since(deletionStart(p)) < k.linger {
				continue
			}
			zero := int64(0)
			err = c.Client().CoreV1().Pods("shop").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		case p.Status.Phase == corev1.PodPending:
			status := corev1.ConditionTrue
			if k.ready != nil && !k.ready(p) {
				status = corev1.ConditionFalse
			}
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
			_, err = c.Client().CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// deletionStart is when a pod's graceful deletion began.
func deletionStart(p *corev1.Pod) time.Time {
	var grace int64
	if p.DeletionGracePeriodSeconds != nil {
		grace = *p.DeletionGracePeriodSeconds
	}
	return p.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
}

// podWatch replays the pod events of namespace shop into a map and runs a
// check after every event, recording the first failure. Start it while the
// pods are quiet: it seeds the map with a list taken after the watch began.
type podWatch struct {
	w    watch.Interface
	done chan struct{}

	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	events  int
	failure string
}

func watchPods(t *testing.T, c *Cluster, check func(pods map[string]*corev1.Pod, ev watch.Event) string) *podWatch {
	t.Helper()
	w, err := c.Client().CoreV1().Pods("shop").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{w: w, done: make(chan struct{}), pods: map[string]*corev1.Pod{}}
	for _, p := range listPods(t, c) {
		pw.pods[p.Name] = p.DeepCopy()
	}
	go func() {
		defer close(pw.done)
		for ev := range w.ResultChan() {
			pw.apply(ev, check)
		}
	}()
	t.Cleanup(pw.stop)
	return pw
}

func (pw *podWatch) apply(ev watch.Event, check func(map[string]*corev1.Pod, watch.Event) string) {
	p, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if ev.Type == watch.Deleted {
		delete(pw.pods, p.Name)
	} else {
		pw.pods[p.Name] = p
	}
	pw.events++
	if msg := check(pw.pods, ev); msg != "" && pw.failure == "" {
		pw.failure = msg
	}
}

// stop ends the watch and returns how many events were checked and the
// first failure ("" if none). It may be called more than once.
func (pw *podWatch) stop() {
	pw.w.Stop()
	<-pw.done
}

func (pw *podWatch) result() (int, string) {
	pw.stop()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.events, pw.failure
}

// waitRollout waits up to 20s for a rollout to finish.
func waitRollout(t *testing.T, c *Cluster, kind, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitRollout(ctx, kind, "shop", name); err != nil {
		msg, _, _ := c.RolloutStatus(context.Background(), kind, "shop", name)
		t.Fatalf("rollout of %s %s: %v (last status: %s)", kind, name, err, msg)
	}
}
