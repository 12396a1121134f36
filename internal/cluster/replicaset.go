package cluster

import (
	"context"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
)

// burstReplicas is the most pods one sync creates or deletes, the
// ReplicaSet controller's BurstReplicas (500); the rest follow in later
// syncs.
const burstReplicas = 500

// expectationTTL bounds how long a controller waits to observe its own pod
// creations and deletions before trusting its cache again.
const expectationTTL = 30 * time.Second

// replicaSetController creates and deletes pods so each ReplicaSet has
// spec.replicas active pods (kube-controller-manager's replicaset
// controller). Like the real one, it records the creations and deletions it
// expects to see in its cache and does not act again on a ReplicaSet until
// they arrived, so a stale cache never makes it overshoot. Its
// status.availableReplicas counts pods Ready for longer than
// spec.minReadySeconds (IsPodAvailable); while a ready pod waits for that,
// the ReplicaSet is requeued for the moment it passes, so availability (and
// the Deployment's rollout) moves on without other events.
type replicaSetController struct {
	c        *Cluster
	w        *worker
	rsLister appslisters.ReplicaSetLister
	podIndex cache.Indexer // pods by controller UID (podControllerUIDIndex)

	mu  sync.Mutex
	exp map[string]*expectation
}

type expectation struct {
	adds, dels int
	at         time.Time
}

func newReplicaSetController(c *Cluster) *replicaSetController {
	rs := c.factory.Apps().V1().ReplicaSets()
	pods := c.factory.Core().V1().Pods()
	addPodControllerUIDIndex(pods.Informer())
	rc := &replicaSetController{c: c, rsLister: rs.Lister(), podIndex: pods.Informer().GetIndexer(), exp: map[string]*expectation{}}
	rc.w = newWorker("replicaset", c.cfg.Logger, rc.sync, rs.Informer().HasSynced, pods.Informer().HasSynced)
	rs.Informer().AddEventHandler(handler(selfKey, rc.w.enqueue))
	pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { rc.observe(obj, true) },
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Pod), cur.(*corev1.Pod)
			if o.DeletionTimestamp == nil && n.DeletionTimestamp != nil {
				rc.observe(cur, false)
				return
			}
			for _, k := range ownerKey("ReplicaSet")(cur) {
				rc.w.enqueue(k)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp == nil {
				rc.observe(obj, false)
				return
			}
			for _, k := range ownerKey("ReplicaSet")(obj) {
				rc.w.enqueue(k)
			}
		},
	})
	return rc
}

func (rc *replicaSetController) run(ctx context.Context) { rc.w.run(ctx) }

// observe lowers the owner's expectations for an arrived creation (add) or
// deletion, then queues the owner.
func (rc *replicaSetController) observe(obj any, add bool) {
	for _, k := range ownerKey("ReplicaSet")(obj) {
		rc.mu.Lock()
		if e := rc.exp[k]; e != nil {
			if add && e.adds > 0 {
				e.adds--
			} else if !add && e.dels > 0 {
				e.dels--
			}
		}
		rc.mu.Unlock()
		rc.w.enqueue(k)
	}
}

func (rc *replicaSetController) satisfied(key string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := rc.exp[key]
	return e == nil || (e.adds <= 0 && e.dels <= 0) || time.Since(e.at) > expectationTTL
}

func (rc *replicaSetController) expect(key string, adds, dels int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.exp[key] = &expectation{adds: adds, dels: dels, at: time.Now()}
}

func (rc *replicaSetController) lower(key string, adds, dels int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if e := rc.exp[key]; e != nil {
		e.adds -= adds
		e.dels -= dels
	}
}

func (rc *replicaSetController) sync(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	rs, err := rc.rsLister.ReplicaSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		rc.mu.Lock()
		delete(rc.exp, key)
		rc.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	pods, err := rc.ownedPods(rs)
	if err != nil {
		return err
	}
	var active []*corev1.Pod
	for _, p := range pods {
		if IsPodActive(p) {
			active = append(active, p)
		}
	}
	if rc.satisfied(key) {
		if err := rc.manage(ctx, key, rs, active); err != nil {
			return err
		}
	}
	next, err := rc.updateStatus(ctx, rs, active)
	if next > 0 {
		rc.w.enqueueAfter(key, next)
	}
	return err
}

func (rc *replicaSetController) ownedPods(rs *appsv1.ReplicaSet) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		return nil, err
	}
	mine, err := podsControlledBy(rc.podIndex, rs.Namespace, rs.UID)
	if err != nil {
		return nil, err
	}
	var owned []*corev1.Pod
	for _, p := range mine {
		if sel.Matches(labels.Set(p.Labels)) {
			owned = append(owned, p)
		}
	}
	return owned, nil
}

// IsPodActive reports whether a pod counts towards its controller's replicas:
// not terminating and not finished.
func IsPodActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func (rc *replicaSetController) manage(ctx context.Context, key string, rs *appsv1.ReplicaSet, active []*corev1.Pod) error {
	diff := int(*rs.Spec.Replicas) - len(active)
	diff = max(min(diff, burstReplicas), -burstReplicas)
	switch {
	case diff > 0:
		rc.expect(key, diff, 0)
		created, err := slowStart(ctx, diff, func() error { return rc.createPod(ctx, rs) })
		if err != nil {
			rc.lower(key, diff-created, 0)
			return err
		}
	case diff < 0:
		victims := rankForDeletion(active)[:-diff]
		rc.expect(key, 0, len(victims))
		for i, p := range victims {
			err := rc.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				rc.lower(key, 0, len(victims)-i)
				return err
			}
		}
	}
	return nil
}

// slowStart calls create n times in batches of 1, 2, 4, ... and stops at the
// first batch with an error or when ctx ends, as the controller's
// slowStartBatch does so a failing create is not repeated hundreds of
// times. It returns how many creates succeeded.
func slowStart(ctx context.Context, n int, create func() error) (int, error) {
	done := 0
	for batch := 1; done < n; batch *= 2 {
		for range min(batch, n-done) {
			if ctx.Err() != nil {
				return done, ctx.Err()
			}
			if err := create(); err != nil {
				return done, err
			}
			done++
		}
	}
	return done, nil
}

func (rc *replicaSetController) createPod(ctx context.Context, rs *appsv1.ReplicaSet) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    rs.Name + "-",
			Namespace:       rs.Namespace,
			Labels:          rs.Spec.Template.Labels,
			Annotations:     rs.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))},
		},
		Spec: *rs.Spec.Template.Spec.DeepCopy(),
	}
	_, err := rc.c.client.CoreV1().Pods(rs.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// rankForDeletion orders pods the way the ReplicaSet controller picks victims
// on scale-down: pending before running, not-ready before ready, the most
// recently ready first, then the newest first.
func rankForDeletion(pods []*corev1.Pod) []*corev1.Pod {
	out := append([]*corev1.Pod(nil), pods...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if ra, rb := phaseRank(a), phaseRank(b); ra != rb {
			return ra < rb
		}
		ra, rb := IsPodReady(a), IsPodReady(b)
		if ra != rb {
			return !ra
		}
		if ra && rb {
			ta, tb := readySince(a), readySince(b)
			if !ta.Equal(tb) {
				return ta.After(tb)
			}
		}
		return a.CreationTimestamp.After(b.CreationTimestamp.Time)
	})
	return out
}

func phaseRank(p *corev1.Pod) int {
	switch p.Status.Phase {
	case corev1.PodPending:
		return 0
	case corev1.PodUnknown:
		return 1
	case corev1.PodRunning:
		return 2
	}
	return 0
}

// IsPodReady reports whether the pod's Ready condition is True.
func IsPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// updateStatus writes the ReplicaSet's counts; a pod is available once it has
// been Ready for spec.minReadySeconds. It returns how long until the next
// ready pod becomes available (0 if none waits), for a requeue.
func (rc *replicaSetController) updateStatus(ctx context.Context, rs *appsv1.ReplicaSet, active []*corev1.Pod) (time.Duration, error) {
	st := appsv1.ReplicaSetStatus{Replicas: int32(len(active)), ObservedGeneration: rs.Generation, Conditions: rs.Status.Conditions}
	now := time.Now()
	var next time.Duration
	for _, p := range active {
		st.FullyLabeledReplicas++
		if IsPodReady(p) {
			st.ReadyReplicas++
		}
		if IsPodAvailable(p, rs.Spec.MinReadySeconds, now) {
			st.AvailableReplicas++
		} else if wait := availableIn(p, rs.Spec.MinReadySeconds, now); wait > 0 && (next == 0 || wait < next) {
			next = wait
		}
	}
	if equality.Semantic.DeepEqual(st, rs.Status) {
		return next, nil
	}
	rs = rs.DeepCopy()
	rs.Status = st
	_, err := rc.c.client.AppsV1().ReplicaSets(rs.Namespace).UpdateStatus(ctx, rs, metav1.UpdateOptions{})
	return next, err
}

// IsPodAvailable reports whether a pod is Ready and has been for more than
// minReadySeconds by its Ready condition's lastTransitionTime (a zero time
// never qualifies unless minReadySeconds is 0), as the controllers'
// podutil.IsPodAvailable.
func IsPodAvailable(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	if !IsPodReady(p) {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	since := readySince(p)
	return !since.IsZero() && since.Add(time.Duration(minReadySeconds)*time.Second).Before(now)
}

// availableIn returns how long until a Ready pod passes minReadySeconds, a
// millisecond past the boundary; 0 when it is not ready or already available.
func availableIn(p *corev1.Pod, minReadySeconds int32, now time.Time) time.Duration {
	since := readySince(p)
	if minReadySeconds == 0 || !IsPodReady(p) || since.IsZero() {
		return 0
	}
	wait := since.Add(time.Duration(minReadySeconds) * time.Second).Sub(now)
	if wait < 0 {
		return 0
	}
	return wait + time.Millisecond
}
