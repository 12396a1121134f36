package cluster

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The arithmetic and bookkeeping below follow pkg/controller/deployment/util
// (deployment_util.go) in kubernetes/kubernetes.

// Annotations the Deployment controller keeps on its ReplicaSets, as
// deployment_util.go names them. RevisionAnnotation is also kept on the
// Deployment (the revision of its newest ReplicaSet).
const (
	RevisionAnnotation        = "deployment.kubernetes.io/revision"
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	MaxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
)

// Reasons of the Deployment conditions, as deployment_util.go names them.
const (
	ReasonNewReplicaSetCreated   = "NewReplicaSetCreated"
	ReasonFoundNewReplicaSet     = "FoundNewReplicaSet"
	ReasonReplicaSetUpdated      = "ReplicaSetUpdated"
	ReasonNewReplicaSetAvailable = "NewReplicaSetAvailable"
	ReasonProgressDeadline       = "ProgressDeadlineExceeded"
	ReasonMinimumReplicas        = "MinimumReplicasAvailable"
	ReasonMinimumUnavailable     = "MinimumReplicasUnavailable"
)

// ResolveFenceposts resolves a rolling update's maxSurge and maxUnavailable
// (absolute numbers or percentages; nil means 0) against desired replicas:
// surge rounds up, unavailable rounds down, and when both come out 0
// unavailable becomes 1 so the rollout can progress, as the Deployment
// controller's ResolveFenceposts does. It fails on a malformed percentage.
func ResolveFenceposts(maxSurge, maxUnavailable *intstr.IntOrString, desired int32) (surge, unavailable int32, err error) {
	zero := intstr.FromInt32(0)
	s, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxSurge, zero), int(desired), true)
	if err != nil {
		return 0, 0, fmt.Errorf("cluster: maxSurge: %w", err)
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, zero), int(desired), false)
	if err != nil {
		return 0, 0, fmt.Errorf("cluster: maxUnavailable: %w", err)
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u), nil
}

func isRollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType && d.Spec.Strategy.RollingUpdate != nil
}

// maxSurge is the resolved maxSurge of a RollingUpdate Deployment, else 0.
func maxSurge(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) {
		return 0
	}
	ru := d.Spec.Strategy.RollingUpdate
	s, _, err := ResolveFenceposts(ru.MaxSurge, ru.MaxUnavailable, *d.Spec.Replicas)
	if err != nil {
		return 0
	}
	return s
}

// maxUnavailable is the resolved maxUnavailable of a RollingUpdate
// Deployment, at most its replicas; 0 for Recreate or zero replicas.
func maxUnavailable(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) || *d.Spec.Replicas == 0 {
		return 0
	}
	ru := d.Spec.Strategy.RollingUpdate
	_, u, err := ResolveFenceposts(ru.MaxSurge, ru.MaxUnavailable, *d.Spec.Replicas)
	if err != nil {
		return 0
	}
	return min(u, *d.Spec.Replicas)
}

func specReplicas(rs *appsv1.ReplicaSet) int32 {
	if rs == nil || rs.Spec.Replicas == nil {
		return 0
	}
	return *rs.Spec.Replicas
}

// replicaCount sums spec.replicas (GetReplicaCountForReplicaSets).
func replicaCount(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		n += specReplicas(rs)
	}
	return n
}

// podCount sums, per ReplicaSet, the pods it may still have:
// max(spec.replicas, status.replicas). The real controller sums spec.replicas
// alone, so for the moment between scaling an old ReplicaSet down and the
// ReplicaSet controller deleting its pods, the new ReplicaSet's pods can
// already exist and the total exceed replicas+maxSurge by a pod or so; the
// lab waits until the ReplicaSet controller has seen its deletions.
func podCount(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		if rs != nil {
			n += max(specReplicas(rs), rs.Status.Replicas)
		}
	}
	return n
}

// availableCount sums, per ReplicaSet, min(status.availableReplicas,
// spec.replicas): a ReplicaSet just scaled down keeps reporting its old
// availability until its controller syncs, and the lab never counts pods
// that are about to go. The real controller reads status alone.
func availableCount(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		if rs != nil {
			n += min(rs.Status.AvailableReplicas, specReplicas(rs))
		}
	}
	return n
}

// activeReplicaSets keeps the ReplicaSets with spec.replicas > 0
// (FilterActiveReplicaSets).
func activeReplicaSets(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if specReplicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// byCreation sorts ReplicaSets oldest first, then by name
// (ReplicaSetsByCreationTimestamp).
func byCreation(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool {
		a, b := rss[i], rss[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}

// bySize sorts ReplicaSets largest first; ties go to the newer first when
// newer is set (ReplicaSetsBySizeNewer), to the older first otherwise
// (ReplicaSetsBySizeOlder).
func bySize(rss []*appsv1.ReplicaSet, newer bool) {
	sort.SliceStable(rss, func(i, j int) bool {
		a, b := rss[i], rss[j]
		if specReplicas(a) != specReplicas(b) {
			return specReplicas(a) > specReplicas(b)
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp) != newer
		}
		return (a.Name < b.Name) != newer
	})
}

// equalIgnoreHash compares two pod templates ignoring the pod-template-hash
// label (EqualIgnoreHash).
func equalIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, PodTemplateHashLabel)
	delete(b.Labels, PodTemplateHashLabel)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return equality.Semantic.DeepEqual(a, b)
}

// findNewReplicaSet returns the oldest ReplicaSet whose template equals the
// Deployment's (FindNewReplicaSet), or nil.
func findNewReplicaSet(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	sorted := append([]*appsv1.ReplicaSet(nil), rss...)
	byCreation(sorted)
	for _, rs := range sorted {
		if equalIgnoreHash(&rs.Spec.Template, &d.Spec.Template) {
			return rs
		}
	}
	return nil
}

// revisionOf reads a ReplicaSet's revision annotation; 0 if absent.
func revisionOf(rs *appsv1.ReplicaSet) int64 {
	v, err := strconv.ParseInt(rs.Annotations[RevisionAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func maxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		m = max(m, revisionOf(rs))
	}
	return m
}

// newRSNewReplicas is the size the new ReplicaSet may have now
// (NewRSNewReplicas): everything at once for Recreate; for RollingUpdate as
// many more as fit under replicas+maxSurge, never above replicas.
func newRSNewReplicas(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) int32 {
	if !isRollingUpdate(d) {
		return *d.Spec.Replicas
	}
	cur := specReplicas(newRS)
	maxTotal := *d.Spec.Replicas + maxSurge(d)
	current := podCount(all)
	if current >= maxTotal {
		return cur
	}
	return cur + max(min(maxTotal-current, *d.Spec.Replicas-cur), 0)
}

// setReplicasAnnotations records the Deployment's desired and maximum sizes
// on a ReplicaSet and reports whether anything changed.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, desired, maxTotal int32) bool {
	d, m := strconv.Itoa(int(desired)), strconv.Itoa(int(maxTotal))
	if rs.Annotations[DesiredReplicasAnnotation] == d && rs.Annotations[MaxReplicasAnnotation] == m {
		return false
	}
	rs.Annotations = withLabel(rs.Annotations, DesiredReplicasAnnotation, d)
	rs.Annotations[MaxReplicasAnnotation] = m
	return true
}

func annotationInt(rs *appsv1.ReplicaSet, key string) (int32, bool) {
	v, ok := rs.Annotations[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// proportion is how many replicas one ReplicaSet gets of a proportional
// scale (GetProportion): its share by the max-replicas it was sized for,
// bounded by what is left to add or remove.
func proportion(rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	if specReplicas(rs) == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	frac := fraction(rs, d)
	allowed := toAdd - added
	if toAdd > 0 {
		return min(frac, allowed)
	}
	return max(frac, allowed)
}

func fraction(rs *appsv1.ReplicaSet, d *appsv1.Deployment) int32 {
	if *d.Spec.Replicas == 0 {
		return -specReplicas(rs)
	}
	maxNow := *d.Spec.Replicas + maxSurge(d)
	before, ok := annotationInt(rs, MaxReplicasAnnotation)
	if !ok || before == 0 {
		before = d.Status.Replicas
		if before == 0 {
			return 0
		}
	}
	size := float64(specReplicas(rs)) * float64(maxNow) / float64(before)
	return int32(math.Round(size)) - specReplicas(rs)
}

// isSaturated reports whether the new ReplicaSet runs all replicas, all
// available (IsSaturated).
func isSaturated(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs == nil {
		return false
	}
	desired, ok := annotationInt(rs, DesiredReplicasAnnotation)
	return ok && desired == *d.Spec.Replicas && specReplicas(rs) == *d.Spec.Replicas &&
		rs.Status.AvailableReplicas == *d.Spec.Replicas
}

// deploymentComplete reports whether status shows the rollout finished
// (DeploymentComplete).
func deploymentComplete(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	r := *d.Spec.Replicas
	return st.UpdatedReplicas == r && st.Replicas == r && st.AvailableReplicas == r && st.ObservedGeneration >= d.Generation
}

// deploymentProgressing reports whether status moved forward since the
// stored status (DeploymentProgressing).
func deploymentProgressing(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	old := d.Status
	return st.UpdatedReplicas > old.UpdatedReplicas ||
		st.Replicas-st.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		st.ReadyReplicas > old.ReadyReplicas ||
		st.AvailableReplicas > old.AvailableReplicas
}

func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != 1<<31-1
}

// deploymentTimedOut reports whether the Progressing condition was last
// updated more than progressDeadlineSeconds ago (DeploymentTimedOut).
func deploymentTimedOut(d *appsv1.Deployment, st *appsv1.DeploymentStatus, now time.Time) bool {
	if !hasProgressDeadline(d) {
		return false
	}
	c := deploymentCondition(*st, appsv1.DeploymentProgressing)
	if c == nil || c.Reason == ReasonNewReplicaSetAvailable {
		return false
	}
	if c.Reason == ReasonProgressDeadline {
		return true
	}
	deadline := time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second
	return c.LastUpdateTime.Add(deadline).Before(now)
}
