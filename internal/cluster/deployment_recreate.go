package cluster

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// rolloutRecreate moves a Recreate Deployment one step (recreate.go): scale
// every old ReplicaSet to 0; wait until no pod of theirs is left, terminating
// ones included; then create the new ReplicaSet (or scale it) at replicas.
func (dc *deploymentController) rolloutRecreate(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	all := appendRS(old, newRS)
	scaledDown := false
	for _, rs := range activeReplicaSets(old) {
		scaled, _, err := dc.resize(ctx, rs, 0, d)
		if err != nil {
			return err
		}
		scaledDown = scaledDown || scaled
	}
	if scaledDown {
		return dc.syncRolloutStatus(ctx, all, newRS, d)
	}
	running, err := dc.oldPodsRunning(d, newRS, old)
	if err != nil {
		return err
	}
	if running {
		return dc.syncRolloutStatus(ctx, all, newRS, d)
	}
	if newRS == nil {
		if newRS, err = dc.createReplicaSet(ctx, d, old); err != nil {
			return err
		}
		all = appendRS(old, newRS)
	}
	if _, _, err := dc.resize(ctx, newRS, *d.Spec.Replicas, d); err != nil {
		return err
	}
	if deploymentComplete(d, &d.Status) {
		if err := dc.cleanup(ctx, d, old); err != nil {
			return err
		}
	}
	return dc.syncRolloutStatus(ctx, all, newRS, d)
}

// oldPodsRunning reports whether an old ReplicaSet still counts pods or any
// pod of one is not Succeeded or Failed (oldPodsRunning).
func (dc *deploymentController) oldPodsRunning(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (bool, error) {
	oldUIDs := map[types.UID]bool{}
	for _, rs := range old {
		if rs.Status.Replicas > 0 {
			return true, nil
		}
		oldUIDs[rs.UID] = true
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return false, err
	}
	pods, err := dc.podLister.Pods(d.Namespace).List(sel)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		ref := metav1.GetControllerOf(p)
		if ref == nil || !oldUIDs[ref.UID] || (newRS != nil && ref.UID == newRS.UID) {
			continue
		}
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true, nil
		}
	}
	return false, nil
}
