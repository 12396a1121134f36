package cluster

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
)

// isScalingEvent reports whether spec.replicas differs from the size an
// active ReplicaSet was last given (its desired-replicas annotation).
func isScalingEvent(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) bool {
	for _, rs := range activeReplicaSets(appendRS(old, newRS)) {
		if desired, ok := annotationInt(rs, DesiredReplicasAnnotation); ok && desired != *d.Spec.Replicas {
			return true
		}
	}
	return false
}

// syncScale applies a change of spec.replicas without rolling anything
// (sync in sync.go), also what a paused Deployment gets.
func (dc *deploymentController) syncScale(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	if err := dc.scale(ctx, d, newRS, old); err != nil {
		return err
	}
	return dc.syncStatusOnly(ctx, appendRS(old, newRS), newRS, d)
}

// scale gives all replicas to the only ReplicaSet with pods (or the newest
// if none has), scales old ones to 0 when the new one is saturated, and
// otherwise, for RollingUpdate, spreads replicas+maxSurge minus the current
// total over the ReplicaSets with pods in proportion to their size: larger
// ones first, the rounding leftover to the largest (scale in sync.go).
// Recreate Deployments in the middle of a rollout are left alone.
func (dc *deploymentController) scale(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	if rs := activeOrLatest(newRS, old); rs != nil {
		if specReplicas(rs) == *d.Spec.Replicas {
			return nil
		}
		_, _, err := dc.scaleReplicaSet(ctx, rs, *d.Spec.Replicas, d)
		return err
	}
	if isSaturated(d, newRS) {
		for _, rs := range activeReplicaSets(old) {
			if _, _, err := dc.resize(ctx, rs, 0, d); err != nil {
				return err
			}
		}
		return nil
	}
	if !isRollingUpdate(d) {
		return nil
	}
	all := activeReplicaSets(appendRS(old, newRS))
	allowed := int32(0)
	if *d.Spec.Replicas > 0 {
		allowed = *d.Spec.Replicas + maxSurge(d)
	}
	toAdd := allowed - replicaCount(all)
	if toAdd != 0 {
		bySize(all, toAdd > 0)
	}
	sizes := make([]int32, len(all))
	var added int32
	for i, rs := range all {
		p := proportion(rs, d, toAdd, added)
		sizes[i] = specReplicas(rs) + p
		added += p
	}
	if len(all) > 0 && toAdd != 0 {
		sizes[0] = max(sizes[0]+toAdd-added, 0)
	}
	for i, rs := range all {
		if _, _, err := dc.scaleReplicaSet(ctx, rs, sizes[i], d); err != nil {
			return err
		}
	}
	return nil
}

// activeOrLatest returns the only ReplicaSet with pods, or the newest one
// when none has any, or nil when several have (FindActiveOrLatest).
func activeOrLatest(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(old) == 0 {
		return nil
	}
	old = append([]*appsv1.ReplicaSet(nil), old...)
	byCreation(old)
	active := activeReplicaSets(appendRS(old, newRS))
	switch len(active) {
	case 0:
		if newRS != nil {
			return newRS
		}
		return old[len(old)-1]
	case 1:
		return active[0]
	}
	return nil
}
