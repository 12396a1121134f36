package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// MaxEndpointsPerSlice is the EndpointSlice controller's default
// --max-endpoints-per-slice.
const MaxEndpointsPerSlice = 100

// Labels the EndpointSlice controller sets on the slices it manages.
const (
	ManagedBy     = "endpointslice-controller.k8s.io"
	HeadlessLabel = corev1.IsHeadlessService // "service.kubernetes.io/headless"
)

// EndpointConditions returns an endpoint's conditions for a pod, as
// podToEndpoint in k8s.io/endpointslice/utils.go: serving = pod Ready,
// terminating = deletionTimestamp set, ready = publishNotReadyAddresses ||
// (serving && !terminating).
func EndpointConditions(pod *corev1.Pod, publishNotReady bool) discoveryv1.EndpointConditions {
	serving := IsPodReady(pod)
	terminating := pod.DeletionTimestamp != nil
	ready := publishNotReady || (serving && !terminating)
	return discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
}

// ShouldSetHostname reports whether a pod's endpoint gets its hostname: only
// when the pod sets spec.hostname and its spec.subdomain names this Service
// in the same namespace.
func ShouldSetHostname(pod *corev1.Pod, svc *corev1.Service) bool {
	return pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace
}

// endpointSliceController publishes, for each Service with a selector, the
// addresses of the pods it selects in EndpointSlices of at most
// MaxEndpointsPerSlice endpoints, grouped by resolved port set, changing as
// few slices as it can (kube-controller-manager's endpointslice controller).
// Selector-less Services are left alone: their slices belong to the user.
// It keeps its own record of the slices it last wrote, so a lagging cache
// never makes it publish an endpoint twice.
type endpointSliceController struct {
	c         *Cluster
	w         *worker
	svcLister corelisters.ServiceLister
	podLister corelisters.PodLister

	mu      sync.Mutex
	written map[string][]*discoveryv1.EndpointSlice // by Service key
}

func newEndpointSliceController(c *Cluster) *endpointSliceController {
	svcs := c.factory.Core().V1().Services()
	pods := c.factory.Core().V1().Pods()
	ec := &endpointSliceController{c: c, svcLister: svcs.Lister(), podLister: pods.Lister(), written: map[string][]*discoveryv1.EndpointSlice{}}
	ec.w = newWorker("endpointslice", c.cfg.Logger, ec.sync, svcs.Informer().HasSynced, pods.Informer().HasSynced,
		c.factory.Discovery().V1().EndpointSlices().Informer().HasSynced)
	svcs.Informer().AddEventHandler(handler(func(obj any) []string {
		return []string{cache.MetaObjectToName(obj.(metav1.Object)).String()}
	}, ec.w.enqueue))
	pods.Informer().AddEventHandler(handler(ec.servicesOf, ec.w.enqueue))
	return ec
}

func (ec *endpointSliceController) run(ctx context.Context) { ec.w.run(ctx) }

// servicesOf returns the keys of Services in the pod's namespace whose
// selector matches it.
func (ec *endpointSliceController) servicesOf(obj any) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	svcs, err := ec.svcLister.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var keys []string
	for _, s := range svcs {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			keys = append(keys, pod.Namespace+"/"+s.Name)
		}
	}
	return keys
}

func (ec *endpointSliceController) sync(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	svc, err := ec.svcLister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && len(svc.Spec.Selector) == 0) || (err == nil && svc.Spec.Type == corev1.ServiceTypeExternalName) {
		return ec.deleteAll(ctx, key, ns)
	}
	if err != nil {
		return err
	}
	pods, err := ec.podLister.Pods(ns).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	desired := desiredEndpoints(svc, pods)
	plan := reconcileSlices(svc, ec.current(key), desired)
	return ec.apply(ctx, key, plan)
}

func (ec *endpointSliceController) current(key string) []*discoveryv1.EndpointSlice {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	return ec.written[key]
}

// portGroup is the endpoints that share one resolved port list.
type portGroup struct {
	ports     []discoveryv1.EndpointPort
	endpoints []discoveryv1.Endpoint
}

func portsKey(ps []discoveryv1.EndpointPort) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s/%s/%d", deref(p.Name), deref(p.Protocol), deref(p.Port))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// desiredEndpoints returns, by port-set key, the endpoints the Service should
// publish: every selected pod with an IP that has not finished.
func desiredEndpoints(svc *corev1.Service, pods []*corev1.Pod) map[string]*portGroup {
	groups := map[string]*portGroup{}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for _, pod := range pods {
		if pod.Status.PodIP == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		ports := endpointPorts(svc, pod)
		k := portsKey(ports)
		g := groups[k]
		if g == nil {
			g = &portGroup{ports: ports}
			groups[k] = g
		}
		g.endpoints = append(g.endpoints, podEndpoint(svc, pod))
	}
	return groups
}

// endpointPorts resolves each Service port's targetPort against the pod: a
// number is used as is; a name is looked up among the pod's container ports
// (a pod without that port name gets no entry for it, as FindPort fails).
func endpointPorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, sp := range svc.Spec.Ports {
		port, ok := findPort(pod, sp)
		if !ok {
			continue
		}
		name, proto, appProto := sp.Name, sp.Protocol, sp.AppProtocol
		out = append(out, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port, AppProtocol: appProto})
	}
	return out
}

func findPort(pod *corev1.Pod, sp corev1.ServicePort) (int32, bool) {
	if sp.TargetPort.Type == intstr.Int {
		return sp.TargetPort.IntVal, true
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == sp.TargetPort.StrVal && cp.Protocol == sp.Protocol {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func podEndpoint(svc *corev1.Service, pod *corev1.Pod) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{pod.Status.PodIP},
		Conditions: EndpointConditions(pod, svc.Spec.PublishNotReadyAddresses),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if pod.Spec.NodeName != "" {
		n := pod.Spec.NodeName
		ep.NodeName = &n
	}
	if ShouldSetHostname(pod, svc) {
		ep.Hostname = &pod.Spec.Hostname
	}
	return ep
}

// slicePlan is what one sync writes.
type slicePlan struct {
	create, update []*discoveryv1.EndpointSlice
	keep           []*discoveryv1.EndpointSlice
	remove         []*discoveryv1.EndpointSlice
}

func endpointID(ep discoveryv1.Endpoint) string {
	if ep.TargetRef != nil {
		return string(ep.TargetRef.UID)
	}
	return strings.Join(ep.Addresses, ",")
}

// reconcileSlices computes the writes that turn existing into desired:
// endpoints stay in the slice they are in (updated in place when changed),
// gone endpoints are removed, new ones fill slices with room before new
// slices are made, and emptied slices are deleted. A Service with no
// endpoints keeps one empty placeholder slice, as the real controller does.
func reconcileSlices(svc *corev1.Service, existing []*discoveryv1.EndpointSlice, desired map[string]*portGroup) slicePlan {
	var plan slicePlan
	want := map[string]map[string]discoveryv1.Endpoint{}
	for k, g := range desired {
		want[k] = map[string]discoveryv1.Endpoint{}
		for _, ep := range g.endpoints {
			want[k][endpointID(ep)] = ep
		}
	}
	var open []*discoveryv1.EndpointSlice // kept or updated slices, by port key below
	for _, old := range existing {
		k := portsKey(old.Ports)
		w, ok := want[k]
		if !ok {
			plan.remove = append(plan.remove, old)
			continue
		}
		s := old.DeepCopy()
		s.Endpoints = nil
		for _, ep := range old.Endpoints {
			if next, ok := w[endpointID(ep)]; ok {
				s.Endpoints = append(s.Endpoints, next)
				delete(w, endpointID(ep))
			}
		}
		s.Labels = sliceLabels(svc)
		if len(s.Endpoints) == 0 {
			plan.remove = append(plan.remove, old)
			continue
		}
		open = append(open, s)
		if equality.Semantic.DeepEqual(s, old) {
			plan.keep = append(plan.keep, s)
		} else {
			plan.update = append(plan.update, s)
		}
	}
	for _, k := range sortedGroupKeys(desired) {
		rest := orderedRest(desired[k], want[k])
		for _, s := range open {
			for len(rest) > 0 && len(s.Endpoints) < MaxEndpointsPerSlice && portsKey(s.Ports) == k {
				s.Endpoints = append(s.Endpoints, rest[0])
				rest = rest[1:]
				plan.markUpdated(s)
			}
		}
		for len(rest) > 0 {
			n := min(len(rest), MaxEndpointsPerSlice)
			plan.create = append(plan.create, newSlice(svc, desired[k].ports, rest[:n]))
			rest = rest[n:]
		}
	}
	if len(plan.keep)+len(plan.update)+len(plan.create) == 0 {
		plan.placeholder(svc)
	}
	return plan
}

func sortedGroupKeys(m map[string]*portGroup) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// orderedRest returns the still-unplaced endpoints of g in g's order.
func orderedRest(g *portGroup, left map[string]discoveryv1.Endpoint) []discoveryv1.Endpoint {
	var out []discoveryv1.Endpoint
	for _, ep := range g.endpoints {
		if _, ok := left[endpointID(ep)]; ok {
			out = append(out, ep)
		}
	}
	return out
}

func (p *slicePlan) markUpdated(s *discoveryv1.EndpointSlice) {
	for i, k := range p.keep {
		if k == s {
			p.keep = append(p.keep[:i], p.keep[i+1:]...)
			p.update = append(p.update, s)
			return
		}
	}
}

// placeholder keeps (or creates) one empty slice for a Service without
// endpoints, reusing a slice being removed when there is one.
func (p *slicePlan) placeholder(svc *corev1.Service) {
	if len(p.remove) > 0 {
		s := p.remove[0].DeepCopy()
		p.remove = p.remove[1:]
		s.Endpoints, s.Ports, s.Labels = []discoveryv1.Endpoint{}, nil, sliceLabels(svc)
		p.update = append(p.update, s)
		return
	}
	p.create = append(p.create, newSlice(svc, nil, []discoveryv1.Endpoint{}))
}

func sliceLabels(svc *corev1.Service) map[string]string {
	l := map[string]string{}
	for k, v := range svc.Labels {
		l[k] = v
	}
	l[discoveryv1.LabelServiceName] = svc.Name
	l[discoveryv1.LabelManagedBy] = ManagedBy
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		l[HeadlessLabel] = ""
	}
	return l
}

func newSlice(svc *corev1.Service, ports []discoveryv1.EndpointPort, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    svc.Name + "-",
			Namespace:       svc.Namespace,
			Labels:          sliceLabels(svc),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   append([]discoveryv1.Endpoint(nil), eps...),
	}
}

func (ec *endpointSliceController) apply(ctx context.Context, key string, plan slicePlan) error {
	api := ec.c.client.DiscoveryV1().EndpointSlices
	next := append([]*discoveryv1.EndpointSlice(nil), plan.keep...)
	var firstErr error
	record := func(s *discoveryv1.EndpointSlice, err error) {
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		next = append(next, s)
	}
	for _, s := range plan.update {
		record(api(s.Namespace).Update(ctx, s, metav1.UpdateOptions{}))
	}
	for _, s := range plan.create {
		record(api(s.Namespace).Create(ctx, s, metav1.CreateOptions{}))
	}
	for _, s := range plan.remove {
		if err := api(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			next = append(next, s)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	ec.mu.Lock()
	ec.written[key] = next
	ec.mu.Unlock()
	return firstErr
}

func (ec *endpointSliceController) deleteAll(ctx context.Context, key, ns string) error {
	slices := ec.current(key)
	for i, s := range slices {
		err := ec.c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			ec.mu.Lock()
			ec.written[key] = slices[i:]
			ec.mu.Unlock()
			return err
		}
	}
	ec.mu.Lock()
	delete(ec.written, key)
	ec.mu.Unlock()
	return nil
}
