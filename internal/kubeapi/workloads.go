package kubeapi

import (
	"context"
	"fmt"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Scale sets the spec.replicas of a Deployment or StatefulSet (kind), as
// kubectl scale does, and returns once the informer cache holds the
// change (see UpdateTemplate).
func (c Client) Scale(ctx context.Context, kind, namespace, name string, replicas int32) error {
	return c.editWorkload(ctx, kind, namespace, name, func(r **int32, _ *corev1.PodTemplateSpec) { *r = &replicas })
}

// UpdateTemplate changes the pod template of a Deployment or StatefulSet
// (kind) with edit, as kubectl set image or edit would; the workload's
// update strategy then rolls the change out. It reads the object, edits
// it and writes it back (an update, so a concurrent change of the object
// is the API's Conflict), and returns once the informer cache holds the
// written generation, so that a WaitWorkloads that follows judges the new
// spec and not the one before it (the cache lags the API by a watch
// event; with a real API server that lag let the wait return while a
// scale-out had no new pod yet).
func (c Client) UpdateTemplate(ctx context.Context, kind, namespace, name string, edit func(*corev1.PodTemplateSpec)) error {
	return c.editWorkload(ctx, kind, namespace, name, func(_ **int32, t *corev1.PodTemplateSpec) { edit(t) })
}

// editWorkload reads a Deployment or StatefulSet, lets edit change its
// spec.replicas and pod template, writes it back, and waits until the
// informer cache holds the written generation.
func (c Client) editWorkload(ctx context.Context, kind, namespace, name string, edit func(replicas **int32, t *corev1.PodTemplateSpec)) error {
	apps := c.Clientset.AppsV1()
	f := c.Factory.Apps().V1()
	var written int64
	var cached func() (metav1.Object, error)
	switch kind {
	case cluster.KindDeployment:
		d, err := apps.Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&d.Spec.Replicas, &d.Spec.Template)
		if d, err = apps.Deployments(namespace).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return err
		}
		written = d.Generation
		cached = func() (metav1.Object, error) { return f.Deployments().Lister().Deployments(namespace).Get(name) }
	case cluster.KindStatefulSet:
		s, err := apps.StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&s.Spec.Replicas, &s.Spec.Template)
		if s, err = apps.StatefulSets(namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
		written = s.Generation
		cached = func() (metav1.Object, error) { return f.StatefulSets().Lister().StatefulSets(namespace).Get(name) }
	default:
		return fmt.Errorf("kubeapi: cannot change a %s; expected Deployment or StatefulSet", kind)
	}
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		o, err := cached()
		return err == nil && o.GetGeneration() >= written, nil
	})
}

// RolloutRestart restarts a Deployment's or StatefulSet's (kind) pods as
// kubectl rollout restart does: a new template annotation starts a
// rollout. It is cluster.RolloutRestart on the Clientset, whose doc says
// which kinds it takes and what it refuses; it does not wait on the
// caches.
func (c Client) RolloutRestart(ctx context.Context, kind, namespace, name string) error {
	return cluster.RolloutRestart(ctx, c.Clientset, kind, namespace, name)
}

// DeletePod deletes a pod through the API, as kubectl delete pod: it
// terminates gracefully; grace overrides its terminationGracePeriodSeconds
// (nil keeps it).
func (c Client) DeletePod(ctx context.Context, namespace, name string, grace *int64) error {
	return c.Clientset.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: grace})
}
