package kubeapi

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitWorkloads waits until every Deployment and StatefulSet (of
// Namespaces, when set) has all its replicas Ready, as the informer caches
// hold them: its controller observed its latest generation and its status
// counts spec.replicas pods, all Ready. For the workloads in skip, whose
// pods are known never to turn Ready (such as pods with a readiness probe
// on a port nothing listens on), it waits only until their first pod
// exists. When ctx ends first, the error is a *NotReadyError for the last
// workload found short; when Permanent says a pod never will be Ready, it
// is one at once. Other errors are ctx's or the caches'.
func (c Client) WaitWorkloads(ctx context.Context, skip []WorkloadRef) error {
	var last *NotReadyError
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		ws, err := c.workloads()
		if err != nil {
			return false, err
		}
		for _, w := range ws {
			if last = c.short(w, skip); last != nil {
				if last.Permanent {
					return false, last
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil && ctx.Err() != nil {
		return last
	}
	return err
}

// NotReadyError is WaitWorkloads' error for a workload short of Ready
// pods. Its message has no component prefix, for the caller to add one:
// "Deployment shop/web: 1 of 2 pods ready (pod web-5d8f9-x2v4q:
// ErrImagePull: ...)", or "StatefulSet shop/db: no pod created yet" for a
// workload in skip.
type NotReadyError struct {
	Workload WorkloadRef
	// Ready counts the workload's Ready pods (status.readyReplicas); Want
	// is its spec.replicas.
	Ready, Want int32
	// Pod says why the first of its unready pods is not Ready: "pod NAME:
	// REASON: MESSAGE" from a container's waiting state, or "pod NAME:
	// MESSAGE" from the pod's status; "" when none says.
	Pod string
	// Permanent: Client.Permanent said the waiting reason in Pod is one
	// the pod never recovers from; WaitWorkloads returned at once.
	Permanent bool
	// NoPod: the workload was in skip and had no pod yet (Ready, Want and
	// Pod are then unset).
	NoPod bool
}

func (e *NotReadyError) Error() string {
	w := e.Workload
	if e.NoPod {
		return fmt.Sprintf("%s %s/%s: no pod created yet", w.Kind, w.Namespace, w.Name)
	}
	msg := fmt.Sprintf("%s %s/%s: %d of %d pods ready", w.Kind, w.Namespace, w.Name, e.Ready, e.Want)
	if e.Pod != "" {
		msg += " (" + e.Pod + ")"
	}
	return msg
}

// podOwner is what WaitWorkloads reads of a Deployment or StatefulSet.
type podOwner struct {
	kind string
	metav1.ObjectMeta
	selector    *metav1.LabelSelector
	want        int32
	observed    int64
	have, ready int32
}

// workloads lists the Deployments and StatefulSets of c.Namespaces (all
// when none) from the informer caches.
func (c Client) workloads() ([]podOwner, error) {
	apps := c.Factory.Apps().V1()
	namespaces := c.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var ws []podOwner
	for _, ns := range namespaces {
		ds, err := apps.Deployments().Lister().Deployments(ns).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		ss, err := apps.StatefulSets().Lister().StatefulSets(ns).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			ws = append(ws, podOwner{cluster.KindDeployment, d.ObjectMeta, d.Spec.Selector, *d.Spec.Replicas,
				d.Status.ObservedGeneration, d.Status.Replicas, d.Status.ReadyReplicas})
		}
		for _, s := range ss {
			ws = append(ws, podOwner{cluster.KindStatefulSet, s.ObjectMeta, s.Spec.Selector, *s.Spec.Replicas,
				s.Status.ObservedGeneration, s.Status.Replicas, s.Status.ReadyReplicas})
		}
	}
	return ws, nil
}

// short says what w is short of, nil when nothing.
func (c Client) short(w podOwner, skip []WorkloadRef) *NotReadyError {
	ref := WorkloadRef{w.kind, w.Namespace, w.Name}
	if slices.Contains(skip, ref) {
		if w.observed < w.Generation || w.want > 0 && w.have == 0 {
			return &NotReadyError{Workload: ref, NoPod: true}
		}
		return nil // created; its pods are not expected to turn Ready
	}
	if w.observed < w.Generation || w.ready != w.want || w.have != w.want {
		pod, permanent := c.podProblem(w.Namespace, w.selector)
		return &NotReadyError{Workload: ref, Ready: w.ready, Want: w.want, Pod: pod, Permanent: permanent}
	}
	return nil
}

// podProblem describes why the first unready pod a selector picks is not
// ready ("" when none says), and whether c.Permanent says it never will
// be.
func (c Client) podProblem(namespace string, selector *metav1.LabelSelector) (string, bool) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return "", false
	}
	pods, _ := c.Factory.Core().V1().Pods().Lister().Pods(namespace).List(sel)
	for _, p := range pods {
		if cluster.IsPodReady(p) {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Message != "" {
				return fmt.Sprintf("pod %s: %s: %s", p.Name, w.Reason, w.Message), c.Permanent != nil && c.Permanent(p, w.Reason)
			}
		}
		if p.Status.Message != "" {
			return fmt.Sprintf("pod %s: %s", p.Name, p.Status.Message), false
		}
	}
	return "", false
}
