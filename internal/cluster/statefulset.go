package cluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Labels the StatefulSet controller puts on its pods.
const (
	PodNameLabel  = appsv1.StatefulSetPodNameLabel // "statefulset.kubernetes.io/pod-name"
	PodIndexLabel = appsv1.PodIndexLabel           // "apps.kubernetes.io/pod-index"
)

// statefulSetController gives each StatefulSet the pods <name>-0 ..
// <name>-(replicas-1) (kube-controller-manager's statefulset controller),
// with spec.hostname = the pod name and spec.subdomain = spec.serviceName,
// so the governing headless Service publishes <pod>.<svc>.<ns>.svc.<zone>.
// With podManagementPolicy OrderedReady (the default) it creates pod i only
// once pods 0..i-1 are Running and Ready, recreates a missing pod under the
// same name once the old one is gone, and on scale-down removes the highest
// ordinal first, one at a time, each fully gone before the next. Parallel
// creates and deletes without waiting. Template changes (rolling updates)
// are not handled yet.
type statefulSetController struct {
	c         *Cluster
	w         *worker
	setLister appslisters.StatefulSetLister
	podLister corelisters.PodLister
}

func newStatefulSetController(c *Cluster) *statefulSetController {
	sets := c.factory.Apps().V1().StatefulSets()
	pods := c.factory.Core().V1().Pods()
	sc := &statefulSetController{c: c, setLister: sets.Lister(), podLister: pods.Lister()}
	sc.w = newWorker("statefulset", c.cfg.Logger, sc.sync, sets.Informer().HasSynced, pods.Informer().HasSynced)
	sets.Informer().AddEventHandler(handler(func(obj any) []string {
		return []string{cache.MetaObjectToName(obj.(metav1.Object)).String()}
	}, sc.w.enqueue))
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
	set, err := sc.setLister.StatefulSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	pods, err := sc.ownedPods(set)
	if err != nil {
		return err
	}
	if err := sc.manage(ctx, set, pods); err != nil {
		return err
	}
	return sc.updateStatus(ctx, set, pods)
}

// ownedPods returns the set's pods by ordinal (pods it controls with a
// well-formed name).
func (sc *statefulSetController) ownedPods(set *appsv1.StatefulSet) (map[int]*corev1.Pod, error) {
	all, err := sc.podLister.Pods(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := map[int]*corev1.Pod{}
	for _, p := range all {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == set.UID {
			if i := ordinal(set.Name, p.Name); i >= 0 {
				out[i] = p
			}
		}
	}
	return out, nil
}

func (sc *statefulSetController) manage(ctx context.Context, set *appsv1.StatefulSet, pods map[int]*corev1.Pod) error {
	replicas := int(*set.Spec.Replicas)
	parallel := set.Spec.PodManagementPolicy == appsv1.ParallelPodManagement
	for i := 0; i < replicas; i++ {
		p := pods[i]
		switch {
		case p == nil:
			if err := sc.createPod(ctx, set, i); err != nil {
				return err
			}
			if !parallel {
				return nil // wait for it to be Running and Ready
			}
		case !parallel && (p.DeletionTimestamp != nil || !IsPodReady(p) || p.Status.Phase != corev1.PodRunning):
			return nil // wait: terminating pods come back under the same name
		}
	}
	var condemned []int
	for i := range pods {
		if i >= replicas {
			condemned = append(condemned, i)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(condemned)))
	for _, i := range condemned {
		p := pods[i]
		if p.DeletionTimestamp == nil {
			err := sc.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if !parallel {
			return nil // one at a time, each gone before the next
		}
	}
	return nil
}

func (sc *statefulSetController) createPod(ctx context.Context, set *appsv1.StatefulSet, i int) error {
	name := fmt.Sprintf("%s-%d", set.Name, i)
	labels := withLabel(set.Spec.Template.Labels, PodNameLabel, name)
	labels[PodIndexLabel] = strconv.Itoa(i)
	spec := *set.Spec.Template.Spec.DeepCopy()
	spec.Hostname, spec.Subdomain = name, set.Spec.ServiceName
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       set.Namespace,
			Labels:          labels,
			Annotations:     set.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: spec,
	}
	_, err := sc.c.client.CoreV1().Pods(set.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // the old pod of this name is still going; its removal requeues us
	}
	return err
}

func (sc *statefulSetController) updateStatus(ctx context.Context, set *appsv1.StatefulSet, pods map[int]*corev1.Pod) error {
	st := appsv1.StatefulSetStatus{ObservedGeneration: set.Generation, CollisionCount: set.Status.CollisionCount, Conditions: set.Status.Conditions}
	for _, p := range pods {
		if !IsPodActive(p) {
			continue
		}
		st.Replicas++
		st.CurrentReplicas++
		st.UpdatedReplicas++
		if IsPodReady(p) {
			st.ReadyReplicas++
			st.AvailableReplicas++
		}
	}
	if equality.Semantic.DeepEqual(st, set.Status) {
		return nil
	}
	set = set.DeepCopy()
	set.Status = st
	_, err := sc.c.client.AppsV1().StatefulSets(set.Namespace).UpdateStatus(ctx, set, metav1.UpdateOptions{})
	return err
}
