package cluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// calculateStatus sums the ReplicaSets' status into the Deployment's and
// sets the Available condition: True once availableReplicas reaches
// replicas-maxUnavailable (calculateStatus in sync.go).
func calculateStatus(all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) appsv1.DeploymentStatus {
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, CollisionCount: d.Status.CollisionCount}
	for _, rs := range all {
		st.Replicas += rs.Status.Replicas
		st.ReadyReplicas += rs.Status.ReadyReplicas
		st.AvailableReplicas += rs.Status.AvailableReplicas
	}
	if newRS != nil {
		st.UpdatedReplicas = newRS.Status.Replicas
	}
	st.UnavailableReplicas = max(replicaCount(all)-st.AvailableReplicas, 0)
	st.Conditions = append([]appsv1.DeploymentCondition(nil), d.Status.Conditions...)
	if st.AvailableReplicas >= *d.Spec.Replicas-maxUnavailable(d) {
		setDeploymentCondition(&st, newDeploymentCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue,
			ReasonMinimumReplicas, "Deployment has minimum availability."))
	} else {
		setDeploymentCondition(&st, newDeploymentCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse,
			ReasonMinimumUnavailable, "Deployment does not have minimum availability."))
	}
	return st
}

// syncStatusOnly writes the calculated status (syncDeploymentStatus).
func (dc *deploymentController) syncStatusOnly(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	st := calculateStatus(all, newRS, d)
	if equality.Semantic.DeepEqual(d.Status, st) {
		return nil
	}
	d.Status = st
	return dc.updateStatus(ctx, d)
}

// syncRolloutStatus writes the calculated status with the Progressing
// condition of progress.go: NewReplicaSetAvailable once complete,
// ReplicaSetUpdated while counts move forward, ProgressDeadlineExceeded when
// nothing moved for progressDeadlineSeconds. While progress is expected it
// requeues the Deployment for the deadline.
func (dc *deploymentController) syncRolloutStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	st := calculateStatus(all, newRS, d)
	if !hasProgressDeadline(d) {
		removeDeploymentCondition(&st, appsv1.DeploymentProgressing)
	}
	cur := deploymentCondition(d.Status, appsv1.DeploymentProgressing)
	complete := st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == ReasonNewReplicaSetAvailable
	if hasProgressDeadline(d) && !complete {
		setProgressing(d, &st, newRS, cur)
	}
	if equality.Semantic.DeepEqual(d.Status, st) {
		dc.requeueStuck(d, st)
		return nil
	}
	d.Status = st
	return dc.updateStatus(ctx, d)
}

func setProgressing(d *appsv1.Deployment, st *appsv1.DeploymentStatus, newRS *appsv1.ReplicaSet, cur *appsv1.DeploymentCondition) {
	subject := fmt.Sprintf("Deployment %q", d.Name)
	if newRS != nil {
		subject = fmt.Sprintf("ReplicaSet %q", newRS.Name)
	}
	switch {
	case deploymentComplete(d, st):
		setDeploymentCondition(st, newDeploymentCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue,
			ReasonNewReplicaSetAvailable, subject+" has successfully progressed."))
	case deploymentProgressing(d, st):
		c := newDeploymentCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonReplicaSetUpdated, subject+" is progressing.")
		if cur != nil {
			if cur.Status == corev1.ConditionTrue {
				c.LastTransitionTime = cur.LastTransitionTime
			}
			removeDeploymentCondition(st, appsv1.DeploymentProgressing)
		}
		setDeploymentCondition(st, c)
	case deploymentTimedOut(d, st, time.Now()):
		setDeploymentCondition(st, newDeploymentCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse,
			ReasonProgressDeadline, subject+" has timed out progressing."))
	}
}

// requeueStuck queues d again for when its progress deadline passes, plus a
// second (requeueStuckDeployment), so a stalled rollout gets its
// ProgressDeadlineExceeded condition without other events.
func (dc *deploymentController) requeueStuck(d *appsv1.Deployment, st appsv1.DeploymentStatus) {
	c := deploymentCondition(st, appsv1.DeploymentProgressing)
	if !hasProgressDeadline(d) || c == nil || c.Reason == ReasonNewReplicaSetAvailable || c.Reason == ReasonProgressDeadline {
		return
	}
	if deploymentComplete(d, &st) {
		return
	}
	after := time.Until(c.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second))
	dc.w.enqueueAfter(d.Namespace+"/"+d.Name, max(after, 0)+time.Second)
}

func newDeploymentCondition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string) appsv1.DeploymentCondition {
	now := metav1.Now()
	return appsv1.DeploymentCondition{Type: t, Status: s, LastUpdateTime: now, LastTransitionTime: now, Reason: reason, Message: msg}
}

func deploymentCondition(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setDeploymentCondition replaces the condition of c's type unless it has
// the same status and reason; a same-status change keeps its
// lastTransitionTime (SetDeploymentCondition).
func setDeploymentCondition(st *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	cur := deploymentCondition(*st, c.Type)
	if cur != nil && cur.Status == c.Status && cur.Reason == c.Reason {
		return
	}
	if cur != nil && cur.Status == c.Status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	removeDeploymentCondition(st, c.Type)
	st.Conditions = append(st.Conditions, c)
}

func removeDeploymentCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	var out []appsv1.DeploymentCondition
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	st.Conditions = out
}
