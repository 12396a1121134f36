package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/endpoints"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitReady waits until every Deployment and StatefulSet has all its
// replicas Ready and the data plane caught up: every Service's
// EndpointSlices list its ready pods and the dataplane serves each
// ClusterIP port with exactly those endpoints. The error names what is
// still short.
func (l *Lab) WaitReady(ctx context.Context) error { return l.WaitReadyExcept(ctx, nil) }

// WaitReadyExcept is WaitReady, except for the workloads in skip, whose
// pods are known never to turn Ready (such as pods with a readiness probe
// on a port nothing listens on): for those it waits until their first pod
// exists.
func (l *Lab) WaitReadyExcept(ctx context.Context, skip []WorkloadRef) error {
	if err := l.waitDeployments(ctx, skip); err != nil {
		return err
	}
	var short string
	err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		short = l.dataplaneShort()
		return short == "", nil
	})
	if err != nil && short != "" {
		return fmt.Errorf("lab: %s", short)
	}
	return err
}

// dataplaneShort describes the first Service whose slices do not match its
// ready pods, or whose VIP rules do not match its slices (hand-written ones
// included); "" when all match.
func (l *Lab) dataplaneShort() string {
	f := l.Cluster.Factory()
	svcs, _ := f.Core().V1().Services().Lister().List(labels.Everything())
	var served map[netip.AddrPort]servedVIP
	for _, s := range svcs {
		slices, _ := f.Discovery().V1().EndpointSlices().Lister().EndpointSlices(s.Namespace).List(
			labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Name}))
		want, short := l.slicesShort(s, slices)
		if short != "" {
			return short
		}
		// A Service without a selector (the l7-proxy gateway's, the API
		// server's kubernetes Service) has only hand-written slices: no
		// pod count to match, but kube-proxy must still serve what they
		// list before traffic starts.
		if s.Spec.ClusterIP == corev1.ClusterIPNone || s.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		if served == nil {
			var err error
			if served, err = l.dp.served(); err != nil {
				return err.Error()
			}
		}
		if short := vipsShort(s, slices, want, served); short != "" {
			return short
		}
	}
	return ""
}

// slicesShort returns how many of the pods Service s selects are ready,
// and, when its controller-written slices list another number of ready
// endpoints, what is short ("" when they match, or s has no selector).
func (l *Lab) slicesShort(s *corev1.Service, slices []*discoveryv1.EndpointSlice) (int, string) {
	if len(s.Spec.Selector) == 0 {
		return 0, ""
	}
	want := 0
	pods, _ := l.Cluster.Factory().Core().V1().Pods().Lister().Pods(s.Namespace).List(labels.SelectorFromSet(s.Spec.Selector))
	for _, p := range pods {
		if cluster.IsPodReady(p) && p.DeletionTimestamp == nil {
			want++
		}
	}
	got := 0
	for _, es := range slices {
		if es.Labels[discoveryv1.LabelManagedBy] != cluster.ManagedBy {
			continue // hand-written: the API takes them, kube-proxy uses them
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				got++
			}
		}
	}
	if got != want {
		return want, fmt.Sprintf("Service %s/%s: EndpointSlices list %d ready endpoints, %d pods are ready", s.Namespace, s.Name, got, want)
	}
	return want, ""
}

// vipsShort describes the first TCP port of ClusterIP Service s that the
// dataplane (served) does not serve with what all of its slices list (the
// controller's, now matching the want ready pods, and any hand-written
// one); "" when every port matches.
func vipsShort(s *corev1.Service, slices []*discoveryv1.EndpointSlice, want int, served map[netip.AddrPort]servedVIP) string {
	for _, sp := range s.Spec.Ports {
		if sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		vip := netip.AddrPortFrom(netip.MustParseAddr(s.Spec.ClusterIP), uint16(sp.Port))
		n, listening := served[vip].endpoints, served[vip].accepting
		eps, _ := endpoints.Filter{Port: sp.Name}.Endpoints(slices)
		if e := len(endpoints.Eligible(eps)); n != e || listening != (e > 0) {
			msg := fmt.Sprintf("Service %s/%s: kube-proxy serves %v with %d endpoints, its EndpointSlices have %d", s.Namespace, s.Name, vip, n, e)
			if len(s.Spec.Selector) > 0 {
				msg += fmt.Sprintf(" (%d pods are ready)", want)
			}
			return msg
		}
	}
	return ""
}

// WorkloadRef names a Deployment or StatefulSet, for WaitReadyExcept.
type WorkloadRef struct {
	Kind, Namespace, Name string // Kind is "Deployment" or "StatefulSet"
}

// waitDeployments waits until every Deployment and StatefulSet has all its
// replicas Ready, failing fast when a pod can never run.
func (l *Lab) waitDeployments(ctx context.Context, skip []WorkloadRef) error {
	f := l.Cluster.Factory()
	var short string
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		ds, err := f.Apps().V1().Deployments().Lister().List(labels.Everything())
		if err != nil {
			return false, err
		}
		ss, err := f.Apps().V1().StatefulSets().Lister().List(labels.Everything())
		if err != nil {
			return false, err
		}
		var ws []podOwner
		for _, d := range ds {
			ws = append(ws, podOwner{"Deployment", d.ObjectMeta, d.Spec.Selector, *d.Spec.Replicas,
				d.Status.ObservedGeneration, d.Status.Replicas, d.Status.ReadyReplicas})
		}
		for _, s := range ss {
			ws = append(ws, podOwner{"StatefulSet", s.ObjectMeta, s.Spec.Selector, *s.Spec.Replicas,
				s.Status.ObservedGeneration, s.Status.Replicas, s.Status.ReadyReplicas})
		}
		for _, w := range ws {
			if slices.Contains(skip, WorkloadRef{w.kind, w.Namespace, w.Name}) {
				if w.observed < w.Generation || w.want > 0 && w.have == 0 {
					short = fmt.Sprintf("%s %s/%s: no pod created yet", w.kind, w.Namespace, w.Name)
					return false, nil
				}
				continue // created; its pods are not expected to turn Ready
			}
			if w.observed < w.Generation || w.ready != w.want || w.have != w.want {
				problem, fatal := l.podProblem(w.Namespace, w.selector)
				short = fmt.Sprintf("%s %s/%s: %d of %d pods ready%s", w.kind, w.Namespace, w.Name, w.ready, w.want, problem)
				if fatal {
					return false, fmt.Errorf("lab: %s", short)
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && short != "" && ctx.Err() != nil {
		return fmt.Errorf("lab: %s", short)
	}
	return err
}

// podOwner is what waitDeployments reads of a Deployment or StatefulSet.
type podOwner struct {
	kind string
	metav1.ObjectMeta
	selector    *metav1.LabelSelector
	want        int32
	observed    int64
	have, ready int32
}

// permanent lists the waiting reasons the kubelet never recovers from.
var permanent = map[string]bool{"CreateContainerConfigError": true, "FailedCreatePodSandBox": true, "ErrImagePull": true}

// podProblem describes why the first unready pod a selector picks is not
// ready, and whether it never will be.
func (l *Lab) podProblem(namespace string, selector *metav1.LabelSelector) (string, bool) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return "", false
	}
	pods, _ := l.Cluster.Factory().Core().V1().Pods().Lister().Pods(namespace).List(sel)
	for _, p := range pods {
		if cluster.IsPodReady(p) {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Message != "" {
				return fmt.Sprintf(" (pod %s: %s: %s)", p.Name, w.Reason, w.Message), permanent[w.Reason]
			}
		}
		if p.Status.Message != "" {
			return fmt.Sprintf(" (pod %s: %s)", p.Name, p.Status.Message), false
		}
	}
	return "", false
}
