package runner

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// workloads carries out workload actions on a cluster (plan.Workloads).
type workloads struct{ l Cluster }

func (w workloads) Scale(ctx context.Context, wl plan.Workload, replicas int32) error {
	return w.l.Scale(ctx, wl.Kind, wl.Namespace, wl.Name, replicas)
}

func (w workloads) RolloutRestart(ctx context.Context, wl plan.Workload) error {
	return w.l.RolloutRestart(ctx, wl.Kind, wl.Namespace, wl.Name)
}

func (w workloads) UpdateTemplate(ctx context.Context, wl plan.Workload, image string, args []string) error {
	return w.l.UpdateTemplate(ctx, wl.Kind, wl.Namespace, wl.Name, func(t *corev1.PodTemplateSpec) {
		c := &t.Spec.Containers[0]
		if image != "" {
			c.Image = image
		}
		if args != nil {
			c.Args = slices.Clone(args)
		}
	})
}

// pods picks and acts on a cluster's pods (plan.Pods); rec tells the
// busiest and quietest apart.
type pods struct {
	l   Cluster
	rec *stats.Recorder
}

func (p pods) Do(ctx context.Context, verb plan.PodVerb, namespace, name string, grace *int64) error {
	switch verb {
	case plan.PodDelete:
		return p.l.DeletePod(ctx, namespace, name, grace)
	case plan.PodKill:
		return p.l.KillPod(namespace, name)
	case plan.PodHang, plan.PodResume:
		return p.l.HangPod(namespace, name, verb == plan.PodHang)
	case plan.PodNotReady, plan.PodReady:
		return p.l.SetPodReady(namespace, name, verb == plan.PodReady)
	case plan.PodUnhealthy, plan.PodHealthy:
		return p.l.SetPodHealthy(namespace, name, verb == plan.PodHealthy)
	}
	return fmt.Errorf("runner: no pod action %q", verb)
}

// Pick finds the pod ref names now: a named pod, or one of a workload's
// running pods that are not terminating, by ref.Pick (ties go to the
// older pod, then the name).
func (p pods) Pick(ref plan.PodRef) (string, string, error) {
	if ref.Step != "" {
		if ref.Name = p.rec.StepPod(ref.Step); ref.Name == "" {
			return "", "", fmt.Errorf("step %s picked no pod", ref.Step)
		}
	}
	if ref.Name != "" {
		if _, err := p.lister().Pods(ref.Namespace).Get(ref.Name); err != nil {
			return "", "", fmt.Errorf("no pod %s/%s now", ref.Namespace, ref.Name)
		}
		return ref.Namespace, ref.Name, nil
	}
	w := ref.Workload
	all, err := p.lister().Pods(w.Namespace).List(labels.SelectorFromSet(w.PodLabels))
	if err != nil {
		return "", "", err
	}
	var cands []*corev1.Pod
	for _, pod := range all {
		if pod.DeletionTimestamp == nil && pod.Status.PodIP != "" {
			cands = append(cands, pod)
		}
	}
	if len(cands) == 0 {
		return "", "", fmt.Errorf("%s has no running pod to pick", w)
	}
	slices.SortFunc(cands, p.order(ref.Pick, cands))
	return cands[0].Namespace, cands[0].Name, nil
}

func (p pods) lister() corelisters.PodLister { return p.l.Informers().Core().V1().Pods().Lister() }

// order sorts pods first by pick.
func (p pods) order(pick string, cands []*corev1.Pod) func(a, b *corev1.Pod) int {
	calls := map[string]int64{}
	for _, pod := range cands {
		calls[pod.Name] = p.rec.PodCalls(pod.Name)
	}
	older := func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	}
	switch pick {
	case "quietest":
		return func(a, b *corev1.Pod) int { return cmp.Or(cmp.Compare(calls[a.Name], calls[b.Name]), older(a, b)) }
	case "oldest":
		return older
	case "newest":
		return func(a, b *corev1.Pod) int { return older(b, a) }
	}
	return func(a, b *corev1.Pod) int { return cmp.Or(cmp.Compare(calls[b.Name], calls[a.Name]), older(a, b)) }
}
