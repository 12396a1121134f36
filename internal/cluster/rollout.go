package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// RestartedAtAnnotation is the pod template annotation `kubectl rollout
// restart` sets to the restart time.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// Workload kinds the rollout helpers accept.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
)

// rolloutKind normalises kind the way kubectl's resource names do:
// Deployment (deployment, deployments, deploy) or StatefulSet (statefulset,
// statefulsets, sts), case-insensitive.
func rolloutKind(kind string) (string, error) {
	switch strings.ToLower(kind) {
	case "deployment", "deployments", "deploy":
		return KindDeployment, nil
	case "statefulset", "statefulsets", "sts":
		return KindStatefulSet, nil
	}
	return "", fmt.Errorf("cluster: rollout: unsupported kind %q (want Deployment or StatefulSet)", kind)
}

// RolloutRestart restarts every pod of a Deployment or StatefulSet as
// `kubectl rollout restart` does: it sets the pod template annotation
// kubectl.kubernetes.io/restartedAt to the current time (RFC 3339, whole
// seconds) with a strategic merge patch. That is an ordinary template change,
// which bumps metadata.generation and which the controller rolls out by the
// workload's strategy (a new ReplicaSet for a Deployment, a new revision for
// a StatefulSet). kind is Deployment or StatefulSet (case-insensitive; deploy,
// sts and plurals too). Like kubectl it refuses a paused Deployment; as with
// kubectl, a second restart within the same second changes nothing. It fails
// when the object does not exist. client is any API server's (the
// embedded one's, or a real cluster's); errors are prefixed "cluster:" and
// wrap the API's. Safe for concurrent use.
func RolloutRestart(ctx context.Context, client kubernetes.Interface, kind, namespace, name string) error {
	k, err := rolloutKind(kind)
	if err != nil {
		return err
	}
	now := time.Now().Format(time.RFC3339)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{RestartedAtAnnotation: now}}}}})
	if err != nil {
		return err
	}
	switch k {
	case KindDeployment:
		d, err := client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("cluster: rollout restart: %w", err)
		}
		if d.Spec.Paused {
			return fmt.Errorf("cluster: rollout restart: deployment %s/%s is paused (resume it first)", namespace, name)
		}
		_, err = client.AppsV1().Deployments(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("cluster: rollout restart: %w", err)
		}
	default:
		_, err = client.AppsV1().StatefulSets(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("cluster: rollout restart: %w", err)
		}
	}
	return nil
}

// RolloutRestart is RolloutRestart on the cluster's own API.
func (c *Cluster) RolloutRestart(ctx context.Context, kind, namespace, name string) error {
	return RolloutRestart(ctx, c.client, kind, namespace, name)
}

// ErrProgressDeadline is returned by RolloutStatus and WaitRollout for a
// Deployment whose Progressing condition says ProgressDeadlineExceeded.
var ErrProgressDeadline = errors.New("exceeded its progress deadline")

// RolloutStatus reports on a rollout as `kubectl rollout status` does (its
// DeploymentStatusViewer and StatefulSetStatusViewer) and returns kubectl's
// message. A Deployment is done when its controller observed the latest
// generation, every replica is updated, no old replica is left and every
// updated one is available. A StatefulSet is done when the controller
// observed the latest generation, every replica is ready and, with
// rollingUpdate settings, replicas-partition pods are updated (without them,
// currentRevision equals updateRevision). Errors: unknown kind, missing
// object, a Deployment past its progress deadline (wrapping
// ErrProgressDeadline), a StatefulSet with updateStrategy OnDelete.
func (c *Cluster) RolloutStatus(ctx context.Context, kind, namespace, name string) (msg string, done bool, err error) {
	k, err := rolloutKind(kind)
	if err != nil {
		return "", false, err
	}
	if k == KindDeployment {
		d, err := c.client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, fmt.Errorf("cluster: rollout status: %w", err)
		}
		return deploymentRolloutStatus(d)
	}
	s, err := c.client.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", false, fmt.Errorf("cluster: rollout status: %w", err)
	}
	return statefulSetRolloutStatus(s)
}

// RolloutComplete reports whether RolloutStatus says done.
func (c *Cluster) RolloutComplete(ctx context.Context, kind, namespace, name string) (bool, error) {
	_, done, err := c.RolloutStatus(ctx, kind, namespace, name)
	return done, err
}

// WaitRollout blocks until RolloutStatus says done (nil), fails, or ctx
// ends (ctx.Err()). It re-checks on every change of the object, as
// `kubectl rollout status --watch` does, without polling.
func (c *Cluster) WaitRollout(ctx context.Context, kind, namespace, name string) error {
	k, err := rolloutKind(kind)
	if err != nil {
		return err
	}
	var w watch.Interface
	if k == KindDeployment {
		w, err = c.client.AppsV1().Deployments(namespace).Watch(ctx, metav1.ListOptions{})
	} else {
		w, err = c.client.AppsV1().StatefulSets(namespace).Watch(ctx, metav1.ListOptions{})
	}
	if err != nil {
		return fmt.Errorf("cluster: wait for rollout: %w", err)
	}
	defer w.Stop()
	for {
		if done, err := c.RolloutComplete(ctx, k, namespace, name); err != nil || done {
			return err
		}
		if err := nextEventFor(ctx, w, name); err != nil {
			return err
		}
	}
}

// nextEventFor waits for an event about the object called name.
func nextEventFor(ctx context.Context, w watch.Interface, name string) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("cluster: wait for rollout: watch closed")
			}
			if m, ok := ev.Object.(metav1.Object); ok && m.GetName() == name {
				return nil
			}
		}
	}
}

func deploymentRolloutStatus(d *appsv1.Deployment) (string, bool, error) {
	if d.Generation > d.Status.ObservedGeneration {
		return "Waiting for deployment spec update to be observed...", false, nil
	}
	if c := deploymentCondition(d.Status, appsv1.DeploymentProgressing); c != nil && c.Reason == ReasonProgressDeadline {
		return "", false, fmt.Errorf("cluster: deployment %q %w", d.Name, ErrProgressDeadline)
	}
	st := d.Status
	switch {
	case d.Spec.Replicas != nil && st.UpdatedReplicas < *d.Spec.Replicas:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d out of %d new replicas have been updated...",
			d.Name, st.UpdatedReplicas, *d.Spec.Replicas), false, nil
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d old replicas are pending termination...",
			d.Name, st.Replicas-st.UpdatedReplicas), false, nil
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d of %d updated replicas are available...",
			d.Name, st.AvailableReplicas, st.UpdatedReplicas), false, nil
	}
	return fmt.Sprintf("deployment %q successfully rolled out", d.Name), true, nil
}

func statefulSetRolloutStatus(s *appsv1.StatefulSet) (string, bool, error) {
	if s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		return "", true, fmt.Errorf("cluster: statefulset %q: rollout status is only available for RollingUpdate strategy type", s.Name)
	}
	st := s.Status
	if st.ObservedGeneration == 0 || s.Generation > st.ObservedGeneration {
		return "Waiting for statefulset spec update to be observed...", false, nil
	}
	if s.Spec.Replicas != nil && st.ReadyReplicas < *s.Spec.Replicas {
		return fmt.Sprintf("Waiting for %d pods to be ready...", *s.Spec.Replicas-st.ReadyReplicas), false, nil
	}
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if s.Spec.Replicas != nil && ru.Partition != nil && st.UpdatedReplicas < *s.Spec.Replicas-*ru.Partition {
			return fmt.Sprintf("Waiting for partitioned roll out to finish: %d out of %d new pods have been updated...",
				st.UpdatedReplicas, *s.Spec.Replicas-*ru.Partition), false, nil
		}
		return fmt.Sprintf("partitioned roll out complete: %d new pods have been updated...", st.UpdatedReplicas), true, nil
	}
	if st.UpdateRevision != st.CurrentRevision {
		return fmt.Sprintf("waiting for statefulset rolling update to complete %d pods at revision %s...",
			st.UpdatedReplicas, st.UpdateRevision), false, nil
	}
	return fmt.Sprintf("statefulset rolling update complete %d pods at revision %s...", st.CurrentReplicas, st.CurrentRevision), true, nil
}
