package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// PodTemplateHashLabel is the label the Deployment controller puts on its
// ReplicaSets and their pods.
const PodTemplateHashLabel = appsv1.DefaultDeploymentUniqueLabelKey

// deploymentController keeps one ReplicaSet per pod template of a Deployment
// and sizes them as kube-controller-manager's deployment controller
// (pkg/controller/deployment: sync.go, rolling.go, recreate.go, progress.go)
// does:
//
//   - RollingUpdate: the new ReplicaSet grows while the pods of all
//     ReplicaSets stay within replicas+maxSurge (reconcileNewReplicaSet,
//     NewRSNewReplicas); old ReplicaSets shrink first by their unavailable
//     pods (cleanupUnhealthyReplicas), then while available pods stay at or
//     above replicas-maxUnavailable (scaleDownOldReplicaSetsForRollingUpdate).
//   - Recreate: old ReplicaSets go to 0; once none of their pods is left
//     (terminating ones included) the new ReplicaSet gets all replicas.
//   - A change of spec.replicas while several ReplicaSets have pods spreads
//     the difference over them in proportion to their size, using the
//     desired-replicas and max-replicas annotations (sync.go's scale).
//   - Status: observedGeneration, replicas, updated/ready/available/
//     unavailableReplicas and the Available and Progressing conditions; a
//     finished rollout has Progressing reason NewReplicaSetAvailable, one
//     stuck for progressDeadlineSeconds has ProgressDeadlineExceeded.
//   - Old ReplicaSets at 0 beyond revisionHistoryLimit are deleted.
//
// Differences from the real controller: it reads the Deployment and its
// ReplicaSets from the API at each sync, not from the informer cache, since
// the fake API has no resourceVersion preconditions to reject writes made
// from a stale cache; it counts pods and available pods conservatively (see
// podCount and availableCount); no rollback (spec.rollbackTo), no adoption of
// orphaned ReplicaSets, no events.
type deploymentController struct {
	c         *Cluster
	w         *worker
	rsLister  appslisters.ReplicaSetLister
	podLister corelisters.PodLister
}

func newDeploymentController(c *Cluster) *deploymentController {
	d := c.factory.Apps().V1().Deployments()
	rs := c.factory.Apps().V1().ReplicaSets()
	pods := c.factory.Core().V1().Pods()
	dc := &deploymentController{c: c, rsLister: rs.Lister(), podLister: pods.Lister()}
	dc.w = newWorker("deployment", c.cfg.Logger, dc.sync,
		d.Informer().HasSynced, rs.Informer().HasSynced, pods.Informer().HasSynced)
	d.Informer().AddEventHandler(handler(selfKey, dc.w.enqueue))
	rs.Informer().AddEventHandler(handler(ownerKey("Deployment"), dc.w.enqueue))
	// A Recreate rollout waits for the old pods to be gone.
	onPodDelete := handler(dc.podDeploymentKey, dc.w.enqueue)
	onPodDelete.AddFunc, onPodDelete.UpdateFunc = nil, nil
	pods.Informer().AddEventHandler(onPodDelete)
	return dc
}

func (dc *deploymentController) run(ctx context.Context) { dc.w.run(ctx) }

// selfKey maps an object to its own key.
func selfKey(obj any) []string {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	return []string{cache.MetaObjectToName(m).String()}
}

// ownerKey maps an object to the key of its controlling owner of kind.
func ownerKey(kind string) func(obj any) []string {
	return func(obj any) []string {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil
		}
		ref := metav1.GetControllerOf(m)
		if ref == nil || ref.Kind != kind {
			return nil
		}
		return []string{m.GetNamespace() + "/" + ref.Name}
	}
}

// podDeploymentKey maps a pod to the Deployment owning its ReplicaSet.
func (dc *deploymentController) podDeploymentKey(obj any) []string {
	for _, k := range ownerKey("ReplicaSet")(obj) {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		if rs, err := dc.rsLister.ReplicaSets(ns).Get(name); err == nil {
			return ownerKey("Deployment")(rs)
		}
	}
	return nil
}

// TemplateHash returns the pod-template-hash of a pod template: a stable,
// DNS-label-safe FNV-32a hash of its JSON and of the collision count, like
// the deployment controller's ComputeHash (which hashes a dump of the Go
// object, so the values differ from a real cluster's).
func TemplateHash(t *corev1.PodTemplateSpec, collisions *int32) string {
	h := fnv.New32a()
	b, _ := json.Marshal(t)
	h.Write(b)
	if collisions != nil {
		fmt.Fprintf(h, "%d", *collisions)
	}
	return utilrand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

func (dc *deploymentController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	d, err := dc.c.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || d.DeletionTimestamp != nil {
		return err
	}
	rsList, err := dc.replicaSets(ctx, d)
	if err != nil {
		return err
	}
	newRS, old, err := dc.split(ctx, d, rsList)
	if err != nil {
		return err
	}
	if d.Spec.Paused || isScalingEvent(d, newRS, old) {
		return dc.syncScale(ctx, d, newRS, old)
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return dc.rolloutRecreate(ctx, d, newRS, old)
	}
	return dc.rolloutRolling(ctx, d, newRS, old)
}

// replicaSets lists the ReplicaSets d controls.
func (dc *deploymentController) replicaSets(ctx context.Context, d *appsv1.Deployment) ([]*appsv1.ReplicaSet, error) {
	l, err := dc.c.client.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var owned []*appsv1.ReplicaSet
	for i := range l.Items {
		if ref := metav1.GetControllerOf(&l.Items[i]); ref != nil && ref.UID == d.UID {
			owned = append(owned, &l.Items[i])
		}
	}
	return owned, nil
}

// split returns the ReplicaSet of the current template (nil if there is
// none yet) and the others, and brings the new one's revision and
// minReadySeconds up to date (getAllReplicaSetsAndSyncRevision without
// creating).
func (dc *deploymentController) split(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	newRS := findNewReplicaSet(d, rsList)
	var old []*appsv1.ReplicaSet
	for _, rs := range rsList {
		if rs != newRS {
			old = append(old, rs)
		}
	}
	if newRS == nil {
		return nil, old, nil
	}
	newRS, err := dc.syncNewReplicaSet(ctx, d, newRS, old)
	return newRS, old, err
}

func appendRS(old []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	all := append([]*appsv1.ReplicaSet(nil), old...)
	if newRS != nil {
		all = append(all, newRS)
	}
	return all
}

func (dc *deploymentController) syncNewReplicaSet(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, error) {
	next := maxRevision(old) + 1
	changed := rs.DeepCopy()
	if revisionOf(changed) < next {
		changed.Annotations = withLabel(changed.Annotations, RevisionAnnotation, strconv.FormatInt(next, 10))
	}
	changed.Spec.MinReadySeconds = d.Spec.MinReadySeconds
	if changed.Annotations[RevisionAnnotation] != rs.Annotations[RevisionAnnotation] || changed.Spec.MinReadySeconds != rs.Spec.MinReadySeconds {
		var err error
		if rs, err = dc.c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
	}
	if err := dc.syncRevision(ctx, d, rs); err != nil {
		return nil, err
	}
	if hasProgressDeadline(d) && deploymentCondition(d.Status, appsv1.DeploymentProgressing) == nil {
		setDeploymentCondition(&d.Status, newDeploymentCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue,
			ReasonFoundNewReplicaSet, fmt.Sprintf("Found new replica set %q", rs.Name)))
		return rs, dc.updateStatus(ctx, d)
	}
	return rs, nil
}

// createReplicaSet creates the ReplicaSet of d's current template, named
// <deployment>-<pod-template-hash>, sized by newRSNewReplicas. A name taken
// by another template raises status.collisionCount and fails, so the retry
// hashes to another name.
func (dc *deploymentController) createReplicaSet(ctx context.Context, d *appsv1.Deployment, old []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, error) {
	hash := TemplateHash(&d.Spec.Template, d.Status.CollisionCount)
	tmpl := d.Spec.Template.DeepCopy()
	tmpl.Labels = withLabel(tmpl.Labels, PodTemplateHashLabel, hash)
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels = withLabel(sel.MatchLabels, PodTemplateHashLabel, hash)
	replicas := newRSNewReplicas(d, old, nil)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			Labels:          tmpl.Labels,
			Annotations:     map[string]string{RevisionAnnotation: strconv.FormatInt(maxRevision(old)+1, 10)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: sel, Template: *tmpl, MinReadySeconds: d.Spec.MinReadySeconds},
	}
	setReplicasAnnotations(rs, *d.Spec.Replicas, *d.Spec.Replicas+maxSurge(d))
	created, err := dc.c.client.AppsV1().ReplicaSets(d.Namespace).Create(ctx, rs, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return dc.nameTaken(ctx, d, rs.Name)
	}
	if err != nil {
		return nil, err
	}
	if err := dc.syncRevision(ctx, d, created); err != nil {
		return nil, err
	}
	if hasProgressDeadline(d) {
		setDeploymentCondition(&d.Status, newDeploymentCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue,
			ReasonNewReplicaSetCreated, fmt.Sprintf("Created new replica set %q", created.Name)))
		return created, dc.updateStatus(ctx, d)
	}
	return created, nil
}

func (dc *deploymentController) nameTaken(ctx context.Context, d *appsv1.Deployment, name string) (*appsv1.ReplicaSet, error) {
	got, err := dc.c.client.AppsV1().ReplicaSets(d.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if ref := metav1.GetControllerOf(got); ref != nil && ref.UID == d.UID && equalIgnoreHash(&got.Spec.Template, &d.Spec.Template) {
		return got, nil
	}
	n := int32(1)
	if d.Status.CollisionCount != nil {
		n = *d.Status.CollisionCount + 1
	}
	d.Status.CollisionCount = &n
	if err := dc.updateStatus(ctx, d); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("cluster: deployment %s/%s: ReplicaSet name %s is taken, retrying with collisionCount %d", d.Namespace, d.Name, name, n)
}

// syncRevision copies the new ReplicaSet's revision to the Deployment's
// revision annotation, with a merge patch so it never overwrites a spec
// change made meanwhile.
func (dc *deploymentController) syncRevision(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet) error {
	rev := rs.Annotations[RevisionAnnotation]
	if rev == "" || d.Annotations[RevisionAnnotation] == rev {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RevisionAnnotation: rev}}})
	if err != nil {
		return err
	}
	out, err := dc.c.client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return err
	}
	d.Annotations = out.Annotations
	return nil
}

func (dc *deploymentController) updateStatus(ctx context.Context, d *appsv1.Deployment) error {
	out, err := dc.c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	*d = *out
	return nil
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// resize scales rs to size if it has another size
// (scaleReplicaSetAndRecordEvent) and reports whether it did.
func (dc *deploymentController) resize(ctx context.Context, rs *appsv1.ReplicaSet, size int32, d *appsv1.Deployment) (bool, *appsv1.ReplicaSet, error) {
	if specReplicas(rs) == size {
		return false, rs, nil
	}
	return dc.scaleReplicaSet(ctx, rs, size, d)
}

// scaleReplicaSet sets rs's size and its desired-replicas and max-replicas
// annotations, writing when either changed, and reports whether the size
// changed.
func (dc *deploymentController) scaleReplicaSet(ctx context.Context, rs *appsv1.ReplicaSet, size int32, d *appsv1.Deployment) (bool, *appsv1.ReplicaSet, error) {
	resized := specReplicas(rs) != size
	next := rs.DeepCopy()
	annotated := setReplicasAnnotations(next, *d.Spec.Replicas, *d.Spec.Replicas+maxSurge(d))
	if !resized && !annotated {
		return false, rs, nil
	}
	next.Spec.Replicas = &size
	out, err := dc.c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return false, rs, err
	}
	return resized, out, nil
}

// cleanup deletes the oldest ReplicaSets at 0 pods beyond
// revisionHistoryLimit (cleanupDeployment).
func (dc *deploymentController) cleanup(ctx context.Context, d *appsv1.Deployment, old []*appsv1.ReplicaSet) error {
	if d.Spec.RevisionHistoryLimit == nil {
		return nil
	}
	var cleanable []*appsv1.ReplicaSet
	for _, rs := range old {
		if rs.DeletionTimestamp == nil {
			cleanable = append(cleanable, rs)
		}
	}
	diff := len(cleanable) - int(*d.Spec.RevisionHistoryLimit)
	if diff <= 0 {
		return nil
	}
	sort.SliceStable(cleanable, func(i, j int) bool { return revisionOf(cleanable[i]) < revisionOf(cleanable[j]) })
	for _, rs := range cleanable[:diff] {
		if rs.Status.Replicas != 0 || specReplicas(rs) != 0 || rs.Generation > rs.Status.ObservedGeneration {
			continue
		}
		err := dc.c.client.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
