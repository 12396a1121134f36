package cluster

import (
	"bytes"
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
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// The StatefulSet's revision history, as pkg/controller/history and the
// StatefulSet controller's getStatefulSetRevisions keep it: one
// ControllerRevision per distinct pod template, named <set>-<hash>, holding a
// strategic merge patch that restores spec.template, with a revision number
// that grows with each change (a change back to an older template renumbers
// that revision instead of creating a new one).

// ControllerRevisionHashLabel is the label with a ControllerRevision's hash
// ("controller.kubernetes.io/hash"). Pods carry the full revision name in
// appsv1.StatefulSetRevisionLabel ("controller-revision-hash").
const ControllerRevisionHashLabel = "controller.kubernetes.io/hash"

// revisionPatch is the revision data of a set: {"spec":{"template":{...,
// "$patch":"replace"}}} (getPatch).
func revisionPatch(set *appsv1.StatefulSet) ([]byte, error) {
	raw, err := json.Marshal(set.Spec.Template)
	if err != nil {
		return nil, err
	}
	var tmpl map[string]any
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		return nil, err
	}
	tmpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
}

// hashRevision hashes a revision's data and collision count (HashControllerRevision).
func hashRevision(cr *appsv1.ControllerRevision, collisions *int32) string {
	h := fnv.New32()
	h.Write(cr.Data.Raw)
	if collisions != nil {
		h.Write([]byte(strconv.FormatInt(int64(*collisions), 10)))
	}
	return utilrand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// newRevision builds, without storing, the revision of set's current template.
func newRevision(set *appsv1.StatefulSet, revision int64, collisions *int32) (*appsv1.ControllerRevision, error) {
	patch, err := revisionPatch(set)
	if err != nil {
		return nil, err
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       set.Namespace,
			Labels:          withLabel(set.Spec.Template.Labels, ControllerRevisionHashLabel, ""),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Data:     runtime.RawExtension{Raw: patch},
		Revision: revision,
	}
	hash := hashRevision(cr, collisions)
	cr.Name = set.Name + "-" + hash
	cr.Labels[ControllerRevisionHashLabel] = hash
	return cr, nil
}

// applyRevision returns a copy of set with the template of rev
// (ApplyRevision).
func applyRevision(set *appsv1.StatefulSet, rev *appsv1.ControllerRevision) (*appsv1.StatefulSet, error) {
	raw, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	patched, err := strategicpatch.StrategicMergePatch(raw, rev.Data.Raw, set)
	if err != nil {
		return nil, fmt.Errorf("cluster: apply revision %s: %w", rev.Name, err)
	}
	out := &appsv1.StatefulSet{}
	if err := json.Unmarshal(patched, out); err != nil {
		return nil, fmt.Errorf("cluster: apply revision %s: %w", rev.Name, err)
	}
	return out, nil
}

// listRevisions returns the set's ControllerRevisions by revision number.
func (sc *statefulSetController) listRevisions(ctx context.Context, set *appsv1.StatefulSet) ([]*appsv1.ControllerRevision, error) {
	l, err := sc.c.client.AppsV1().ControllerRevisions(set.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*appsv1.ControllerRevision
	for i := range l.Items {
		if ref := metav1.GetControllerOf(&l.Items[i]); ref != nil && ref.UID == set.UID {
			out = append(out, &l.Items[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Revision != out[j].Revision {
			return out[i].Revision < out[j].Revision
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// revisions returns the set's current and update revisions, creating or
// renumbering the update revision as needed, and the collision count to
// record (getStatefulSetRevisions). The current revision is the one named in
// status.currentRevision, else the update revision.
func (sc *statefulSetController) revisions(ctx context.Context, set *appsv1.StatefulSet, revs []*appsv1.ControllerRevision) (cur, upd *appsv1.ControllerRevision, collisions int32, err error) {
	if set.Status.CollisionCount != nil {
		collisions = *set.Status.CollisionCount
	}
	next := int64(1)
	if len(revs) > 0 {
		next = revs[len(revs)-1].Revision + 1
	}
	upd, err = newRevision(set, next, &collisions)
	if err != nil {
		return nil, nil, collisions, err
	}
	var equal []*appsv1.ControllerRevision
	for _, r := range revs {
		if bytes.Equal(r.Data.Raw, upd.Data.Raw) {
			equal = append(equal, r)
		}
	}
	switch {
	case len(equal) > 0 && equal[len(equal)-1] == revs[len(revs)-1]:
		upd = revs[len(revs)-1]
	case len(equal) > 0:
		renumbered := equal[len(equal)-1].DeepCopy()
		renumbered.Revision = next
		upd, err = sc.c.client.AppsV1().ControllerRevisions(set.Namespace).Update(ctx, renumbered, metav1.UpdateOptions{})
	default:
		upd, err = sc.createRevision(ctx, set, upd, &collisions)
	}
	if err != nil {
		return nil, nil, collisions, err
	}
	for _, r := range revs {
		if r.Name == set.Status.CurrentRevision {
			cur = r
		}
	}
	if cur == nil {
		cur = upd
	}
	return cur, upd, collisions, nil
}

// createRevision stores cr, renaming it with a higher collision count while
// its name is taken by different data (CreateControllerRevision).
func (sc *statefulSetController) createRevision(ctx context.Context, set *appsv1.StatefulSet, cr *appsv1.ControllerRevision, collisions *int32) (*appsv1.ControllerRevision, error) {
	api := sc.c.client.AppsV1().ControllerRevisions(set.Namespace)
	for range 100 {
		hash := hashRevision(cr, collisions)
		cr = cr.DeepCopy()
		cr.Name = set.Name + "-" + hash
		cr.Labels[ControllerRevisionHashLabel] = hash
		created, err := api.Create(ctx, cr, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return created, err
		}
		exists, err := api.Get(ctx, cr.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if bytes.Equal(exists.Data.Raw, cr.Data.Raw) {
			return exists, nil
		}
		*collisions++
	}
	return nil, fmt.Errorf("cluster: statefulset %s/%s: no free ControllerRevision name after 100 collisions", set.Namespace, set.Name)
}

// truncateHistory deletes the oldest revisions that are neither current, nor
// update, nor any pod's, beyond revisionHistoryLimit (truncateHistory).
func (sc *statefulSetController) truncateHistory(ctx context.Context, set *appsv1.StatefulSet, pods map[int]*corev1.Pod, revs []*appsv1.ControllerRevision, cur, upd *appsv1.ControllerRevision) error {
	if set.Spec.RevisionHistoryLimit == nil {
		return nil
	}
	live := map[string]bool{}
	if cur != nil {
		live[cur.Name] = true
	}
	if upd != nil {
		live[upd.Name] = true
	}
	for _, p := range pods {
		live[p.Labels[appsv1.StatefulSetRevisionLabel]] = true
	}
	var history []*appsv1.ControllerRevision
	for _, r := range revs {
		if !live[r.Name] {
			history = append(history, r)
		}
	}
	extra := len(history) - int(*set.Spec.RevisionHistoryLimit)
	for i := 0; i < extra; i++ {
		err := sc.c.client.AppsV1().ControllerRevisions(set.Namespace).Delete(ctx, history[i].Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
