package cluster

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
)

// rolloutRolling moves a RollingUpdate Deployment one step: scale the new
// ReplicaSet up if it may grow, else scale old ones down if they may shrink
// (rolloutRolling in rolling.go). Each step ends the sync; the ReplicaSet
// events it causes bring the next.
func (dc *deploymentController) rolloutRolling(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	if newRS == nil {
		var err error
		if newRS, err = dc.createReplicaSet(ctx, d, old); err != nil {
			return err
		}
	}
	all := appendRS(old, newRS)
	scaledUp, err := dc.reconcileNewReplicaSet(ctx, all, newRS, d)
	if err != nil {
		return err
	}
	if scaledUp {
		return dc.syncRolloutStatus(ctx, all, newRS, d)
	}
	scaledDown, err := dc.reconcileOldReplicaSets(ctx, all, activeReplicaSets(old), newRS, d)
	if err != nil {
		return err
	}
	if scaledDown {
		return dc.syncRolloutStatus(ctx, all, newRS, d)
	}
	if deploymentComplete(d, &d.Status) {
		if err := dc.cleanup(ctx, d, old); err != nil {
			return err
		}
	}
	return dc.syncRolloutStatus(ctx, all, newRS, d)
}

// reconcileNewReplicaSet scales the new ReplicaSet down to replicas if it is
// above, else up as far as maxSurge allows.
func (dc *deploymentController) reconcileNewReplicaSet(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	want := *d.Spec.Replicas
	if cur := specReplicas(newRS); cur == want {
		return false, nil
	} else if cur > want {
		scaled, _, err := dc.resize(ctx, newRS, want, d)
		return scaled, err
	}
	scaled, _, err := dc.resize(ctx, newRS, newRSNewReplicas(d, all, newRS), d)
	return scaled, err
}

// reconcileOldReplicaSets shrinks old ReplicaSets by at most
// pods - minAvailable - unavailable pods of the new ReplicaSet: first by
// their own unavailable pods, then by as many available pods as keep
// availability at replicas-maxUnavailable.
func (dc *deploymentController) reconcileOldReplicaSets(ctx context.Context, all, old []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	if replicaCount(old) == 0 {
		return false, nil
	}
	minAvailable := *d.Spec.Replicas - maxUnavailable(d)
	newUnavailable := specReplicas(newRS) - min(newRS.Status.AvailableReplicas, specReplicas(newRS))
	maxScaledDown := replicaCount(all) - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return false, nil
	}
	old, cleaned, err := dc.cleanupUnhealthyReplicas(ctx, old, d, maxScaledDown)
	if err != nil {
		return false, err
	}
	scaled, err := dc.scaleDownOldReplicaSets(ctx, appendRS(old, newRS), old, d)
	return cleaned+scaled > 0, err
}

// cleanupUnhealthyReplicas scales old ReplicaSets, oldest first, down by
// their unavailable pods, at most maxCleanup in all; the ReplicaSet
// controller deletes not-ready pods first, so availability does not drop.
func (dc *deploymentController) cleanupUnhealthyReplicas(ctx context.Context, old []*appsv1.ReplicaSet, d *appsv1.Deployment, maxCleanup int32) ([]*appsv1.ReplicaSet, int32, error) {
	old = append([]*appsv1.ReplicaSet(nil), old...)
	byCreation(old)
	var total int32
	for i, rs := range old {
		if total >= maxCleanup {
			break
		}
		size := specReplicas(rs)
		unhealthy := size - min(rs.Status.AvailableReplicas, size)
		if size == 0 || unhealthy == 0 {
			continue
		}
		n := min(maxCleanup-total, unhealthy)
		_, updated, err := dc.resize(ctx, rs, size-n, d)
		if err != nil {
			return old, total, err
		}
		total += n
		old[i] = updated
	}
	return old, total, nil
}

// scaleDownOldReplicaSets scales old ReplicaSets, oldest first, down by the
// available pods above replicas-maxUnavailable
// (scaleDownOldReplicaSetsForRollingUpdate).
func (dc *deploymentController) scaleDownOldReplicaSets(ctx context.Context, all, old []*appsv1.ReplicaSet, d *appsv1.Deployment) (int32, error) {
	minAvailable := *d.Spec.Replicas - maxUnavailable(d)
	available := availableCount(all)
	if available <= minAvailable {
		return 0, nil
	}
	old = append([]*appsv1.ReplicaSet(nil), old...)
	byCreation(old)
	want := available - minAvailable
	var total int32
	for _, rs := range old {
		if total >= want {
			break
		}
		size := specReplicas(rs)
		if size == 0 {
			continue
		}
		n := min(size, want-total)
		if _, _, err := dc.resize(ctx, rs, size-n, d); err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
