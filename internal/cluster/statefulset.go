package cluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
)

// Labels the StatefulSet controller puts on its pods.
const (
	PodNameLabel  = appsv1.StatefulSetPodNameLabel // "statefulset.kubernetes.io/pod-name"
	PodIndexLabel = appsv1.PodIndexLabel           // "apps.kubernetes.io/pod-index"
)

// statefulSetController gives each StatefulSet the pods <name>-0 ..
// <name>-(replicas-1) as kube-controller-manager's statefulset controller
// (stateful_set_control.go) does, with spec.hostname = the pod name and
// spec.subdomain = spec.serviceName, so the governing headless Service
// publishes <pod>.<svc>.<ns>.svc.<zone>.
//
//   - podManagementPolicy OrderedReady (the default): pod i is created only
//     once pods 0..i-1 are Running, Ready and available (minReadySeconds); a
//     missing pod comes back under its name once the old one is gone; on
//     scale-down the highest ordinal goes first, one at a time, each fully
//     gone before the next. Parallel creates and deletes without waiting.
//   - Revisions: every distinct template is a ControllerRevision
//     <name>-<hash>; pods carry its name in the controller-revision-hash
//     label; status.currentRevision / updateRevision / currentReplicas /
//     updatedReplicas follow, and currentRevision becomes updateRevision once
//     every pod is updated and Ready. revisionHistoryLimit bounds the rest.
//   - updateStrategy RollingUpdate (the default): pods whose revision is not
//     the update revision are deleted from the highest ordinal down to
//     rollingUpdate.partition (default 0), and recreated by the rules above
//     at the update revision; pods below the partition are recreated at the
//     current revision. As with the MaxUnavailableStatefulSet feature (beta,
//     on by default since Kubernetes 1.35), at most rollingUpdate.
//     maxUnavailable (default 1, at least 1; percent of replicas rounded
//     down) pods in [0, replicas) may be unavailable: with the default that
//     is one pod at a time, each next one only after the recreated pod is
//     Running, Ready and available, for OrderedReady and Parallel alike; with
//     more, that many highest-ordinal pods go at once.
//   - updateStrategy OnDelete: nothing is deleted for an update; pods the
//     user deletes come back at the update revision.
//
// It reads the StatefulSet and its ControllerRevisions from the API at each
// sync (no resourceVersion preconditions in the fake API) and pods from the
// informer cache. No PVCs, no spec.ordinals, no events.
type statefulSetController struct {
	c        *Cluster
	w        *worker
	podIndex cache.Indexer // pods by controller UID (podControllerUIDIndex)
}

func newStatefulSetController(c *Cluster) *statefulSetController {
	sets := c.factory.Apps().V1().StatefulSets()
	pods := c.factory.Core().V1().Pods()
	addPodControllerUIDIndex(pods.Informer())
	sc := &statefulSetController{c: c, podIndex: pods.Informer().GetIndexer()}
	sc.w = newWorker("statefulset", c.cfg.Logger, sc.sync, sets.Informer().HasSynced, pods.Informer().HasSynced)
	sets.Informer().AddEventHandler(handler(selfKey, sc.w.enqueue))
	pods.Informer().AddEventHandler(handler(ownerKey("StatefulSet"), sc.w.enqueue))
	return sc
}

func (sc *statefulSetController) run(ctx context.Context) { sc.w.run(ctx) }

// ordinal returns the ordinal of a pod named <set>-<n>, or -1.
func ordinal(set, pod string) int {
	n, ok := strings.CutPrefix(pod, set+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || strconv.Itoa(i) != n {
		return -1
	}
	return i
}

func (sc *statefulSetController) sync(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	set, err := sc.c.client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || set.DeletionTimestamp != nil {
		return err
	}
	pods, err := sc.ownedPods(set)
	if err != nil {
		return err
	}
	revs, err := sc.listRevisions(ctx, set)
	if err != nil {
		return err
	}
	cur, upd, collisions, err := sc.revisions(ctx, set, revs)
	if err != nil {
		return err
	}
	r := &setRollout{sc: sc, set: set, cur: cur, upd: upd, pods: pods}
	st, err := r.run(ctx, collisions)
	if err == nil {
		err = sc.updateStatus(ctx, set, st)
	}
	if herr := sc.truncateHistory(ctx, set, pods, revs, cur, upd); err == nil {
		err = herr
	}
	if wait := r.nextAvailable(); wait > 0 {
		sc.w.enqueueAfter(key, wait)
	}
	return err
}

// ownedPods returns the set's pods by ordinal (pods it controls with a
// well-formed name).
func (sc *statefulSetController) ownedPods(set *appsv1.StatefulSet) (map[int]*corev1.Pod, error) {
	mine, err := podsControlledBy(sc.podIndex, set.Namespace, set.UID)
	if err != nil {
		return nil, err
	}
	out := map[int]*corev1.Pod{}
	for _, p := range mine {
		if i := ordinal(set.Name, p.Name); i >= 0 {
			out[i] = p
		}
	}
	return out, nil
}

// setRollout is one sync of one StatefulSet (updateStatefulSet).
type setRollout struct {
	sc       *statefulSetController
	set      *appsv1.StatefulSet
	cur, upd *appsv1.ControllerRevision
	pods     map[int]*corev1.Pod

	curSet, updSet *appsv1.StatefulSet
	replicas       []*corev1.Pod // by ordinal in [0, replicas); nil = missing
	condemned      []*corev1.Pod // ordinals >= replicas, highest first
	firstUnhealthy *corev1.Pod   // lowest unhealthy condemned pod, if all replicas are healthy
}

func (r *setRollout) run(ctx context.Context, collisions int32) (appsv1.StatefulSetStatus, error) {
	st := r.status(collisions)
	var err error
	if r.curSet, err = applyRevision(r.set, r.cur); err != nil {
		return st, err
	}
	if r.updSet, err = applyRevision(r.set, r.upd); err != nil {
		return st, err
	}
	r.partition()
	monotonic := r.set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement
	for i := range r.replicas {
		if exit, err := r.processReplica(ctx, i); err != nil || (exit && monotonic) {
			return st, err
		}
	}
	for _, p := range r.condemned {
		if exit, err := r.processCondemned(ctx, p, monotonic); err != nil || (exit && monotonic) {
			return st, err
		}
	}
	if r.set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return st, nil
	}
	deleted, err := r.rollingUpdate(ctx)
	st.CurrentReplicas -= deleted
	return st, err
}

// partition splits the pods into replicas and condemned and finds the first
// unhealthy one.
func (r *setRollout) partition() {
	n := int(*r.set.Spec.Replicas)
	r.replicas = make([]*corev1.Pod, n)
	for i, p := range r.pods {
		if i < n {
			r.replicas[i] = p
		} else {
			r.condemned = append(r.condemned, p)
		}
	}
	sort.Slice(r.condemned, func(i, j int) bool {
		return ordinal(r.set.Name, r.condemned[i].Name) > ordinal(r.set.Name, r.condemned[j].Name)
	})
	for _, p := range r.replicas {
		if p == nil || !isHealthy(p) {
			return
		}
	}
	for i := len(r.condemned) - 1; i >= 0; i-- {
		if !isHealthy(r.condemned[i]) {
			r.firstUnhealthy = r.condemned[i]
			return
		}
	}
}

// status counts the pods (computeReplicaStatus).
func (r *setRollout) status(collisions int32) appsv1.StatefulSetStatus {
	st := appsv1.StatefulSetStatus{
		ObservedGeneration: r.set.Generation, CurrentRevision: r.cur.Name, UpdateRevision: r.upd.Name,
		CollisionCount: &collisions, Conditions: r.set.Status.Conditions,
	}
	now := time.Now()
	for _, p := range r.pods {
		if p.Status.Phase != "" {
			st.Replicas++
		}
		if isRunningAndReady(p) {
			st.ReadyReplicas++
			if IsPodAvailable(p, r.set.Spec.MinReadySeconds, now) {
				st.AvailableReplicas++
			}
		}
		if p.Status.Phase != "" && p.DeletionTimestamp == nil {
			switch p.Labels[appsv1.StatefulSetRevisionLabel] {
			case r.cur.Name:
				st.CurrentReplicas++
				if r.upd.Name == r.cur.Name {
					st.UpdatedReplicas++
				}
			case r.upd.Name:
				st.UpdatedReplicas++
			}
		}
	}
	return st
}

// nextAvailable returns how long until a ready pod passes minReadySeconds.
func (r *setRollout) nextAvailable() time.Duration {
	var next time.Duration
	now := time.Now()
	for _, p := range r.pods {
		if w := availableIn(p, r.set.Spec.MinReadySeconds, now); w > 0 && (next == 0 || w < next) {
			next = w
		}
	}
	return next
}

func isRunningAndReady(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && IsPodReady(p)
}

func isHealthy(p *corev1.Pod) bool { return isRunningAndReady(p) && p.DeletionTimestamp == nil }

func (r *setRollout) available(p *corev1.Pod) bool {
	return isRunningAndReady(p) && IsPodAvailable(p, r.set.Spec.MinReadySeconds, time.Now())
}

// processReplica brings ordinal i towards a healthy pod and reports whether
// an OrderedReady set must stop here (processReplica): failed pods are
// deleted to be recreated, missing ones created, and any pod not yet Running,
// Ready and available blocks the ordinals after it.
func (r *setRollout) processReplica(ctx context.Context, i int) (bool, error) {
	p := r.replicas[i]
	switch {
	case p == nil:
		return true, r.createPod(ctx, i)
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		if p.DeletionTimestamp == nil {
			return true, r.deletePod(ctx, p)
		}
		return true, nil
	}
	return !isHealthy(p) || !r.available(p), nil
}

// processCondemned deletes one pod beyond replicas; an OrderedReady set
// waits for a terminating one to go, and for unhealthy ones other than the
// first unhealthy to become healthy (processCondemned).
func (r *setRollout) processCondemned(ctx context.Context, p *corev1.Pod, monotonic bool) (bool, error) {
	if p.DeletionTimestamp != nil {
		return true, nil
	}
	if monotonic && p != r.firstUnhealthy && (!isRunningAndReady(p) || !r.available(p)) {
		return true, nil
	}
	return true, r.deletePod(ctx, p)
}

// rollingUpdate deletes pods not at the update revision, highest ordinal
// first and not below the partition, while fewer than maxUnavailable pods
// in [0, replicas) are unavailable (updateStatefulSetAfterInvariantEstablished).
// It returns how many it deleted.
func (r *setRollout) rollingUpdate(ctx context.Context) (int32, error) {
	updateMin, maxUnav := 0, 1
	if ru := r.set.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if ru.Partition != nil {
			updateMin = int(*ru.Partition)
		}
		maxUnav = statefulSetMaxUnavailable(ru.MaxUnavailable, len(r.replicas))
	}
	unavailable := 0
	for _, p := range r.replicas {
		if p == nil || !isHealthy(p) || !r.available(p) {
			unavailable++
		}
	}
	var deleted int32
	for target := len(r.replicas) - 1; target >= updateMin && unavailable < maxUnav; target-- {
		p := r.replicas[target]
		if p == nil || p.DeletionTimestamp != nil || p.Labels[appsv1.StatefulSetRevisionLabel] == r.upd.Name {
			continue
		}
		if err := r.deletePod(ctx, p); err != nil {
			return deleted, err
		}
		deleted++
		unavailable++
	}
	return deleted, nil
}

// statefulSetMaxUnavailable resolves rollingUpdate.maxUnavailable against
// replicas, rounding down, at least 1 (getStatefulSetMaxUnavailable).
func statefulSetMaxUnavailable(v *intstr.IntOrString, replicas int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(v, intstr.FromInt32(1)), replicas, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func (r *setRollout) deletePod(ctx context.Context, p *corev1.Pod) error {
	err := r.sc.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// createPod creates ordinal i at the current revision if it is below the
// partition (or, without rollingUpdate settings, below currentReplicas),
// else at the update revision (newVersionedStatefulSetPod).
func (r *setRollout) createPod(ctx context.Context, i int) error {
	from, rev := r.updSet, r.upd.Name
	if st := r.set.Spec.UpdateStrategy; st.Type == appsv1.RollingUpdateStatefulSetStrategyType {
		if (st.RollingUpdate == nil && i < int(r.set.Status.CurrentReplicas)) ||
			(st.RollingUpdate != nil && st.RollingUpdate.Partition != nil && i < int(*st.RollingUpdate.Partition)) {
			from, rev = r.curSet, r.cur.Name
		}
	}
	name := fmt.Sprintf("%s-%d", r.set.Name, i)
	lbl := withLabel(from.Spec.Template.Labels, PodNameLabel, name)
	lbl[PodIndexLabel] = strconv.Itoa(i)
	lbl[appsv1.StatefulSetRevisionLabel] = rev
	spec := *from.Spec.Template.Spec.DeepCopy()
	spec.Hostname, spec.Subdomain = name, r.set.Spec.ServiceName
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       r.set.Namespace,
			Labels:          lbl,
			Annotations:     from.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(r.set, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: spec,
	}
	_, err := r.sc.c.client.CoreV1().Pods(r.set.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // the old pod of this name is still going; its removal requeues us
	}
	return err
}

// updateStatus completes a finished rolling update (currentRevision =
// updateRevision once every replica is updated and Ready) and writes the
// status if it changed.
func (sc *statefulSetController) updateStatus(ctx context.Context, set *appsv1.StatefulSet, st appsv1.StatefulSetStatus) error {
	n := *set.Spec.Replicas
	if set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		st.UpdatedReplicas == n && st.ReadyReplicas == n && st.Replicas == n {
		st.CurrentReplicas, st.CurrentRevision = st.UpdatedReplicas, st.UpdateRevision
	}
	if equality.Semantic.DeepEqual(st, set.Status) {
		return nil
	}
	set = set.DeepCopy()
	set.Status = st
	_, err := sc.c.client.AppsV1().StatefulSets(set.Namespace).UpdateStatus(ctx, set, metav1.UpdateOptions{})
	return err
}
