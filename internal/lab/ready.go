package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/endpoints"
	"github.com/pinlab/pinlab/internal/kubeapi"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
	if err := l.waitWorkloads(ctx, skip); err != nil {
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
type WorkloadRef = kubeapi.WorkloadRef

// waitWorkloads waits until every Deployment and StatefulSet has all its
// replicas Ready (those in skip a pod), failing fast when a pod can never
// run (permanent): kubeapi.Client.WaitWorkloads, its error on a workload
// prefixed "lab:".
func (l *Lab) waitWorkloads(ctx context.Context, skip []WorkloadRef) error {
	err := l.api().WaitWorkloads(ctx, skip)
	var short *kubeapi.NotReadyError
	if errors.As(err, &short) {
		return fmt.Errorf("lab: %w", err)
	}
	return err
}
