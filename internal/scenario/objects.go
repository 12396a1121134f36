package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/workload"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// objects is a set of objects to check or run: a file's, or a variant's
// after its patches.
type objects []Object

// serviceRange is where ClusterIPs of every lab lie: range r of lab.Ranges
// has 127.(95+r).0.0/16, and its cluster DNS has 127.(95+r).0.10.
var serviceRange = [2]netip.Addr{netip.MustParseAddr("127.96.0.0"), netip.MustParseAddr("127.107.255.255")}

// checkFixedClusterIP checks a clusterIP a Service asks for ("" and None
// pass) against the lab's service ranges, as the API server checks it
// against its service-cluster-ip-range: inside a range, and not an address
// the range reserves (its network address, the cluster DNS's .0.10).
func checkFixedClusterIP(s string) error {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return nil // "", None, or invalid (reported by validation)
	}
	if ip.Less(serviceRange[0]) || serviceRange[1].Less(ip) {
		return fmt.Errorf("%s is outside the lab's service ranges (%s to %s, one /16 per lab): the API server allocates ClusterIPs only from its service-cluster-ip-range; leave it empty to get one",
			ip, serviceRange[0], serviceRange[1])
	}
	if b := ip.As4(); b[2] == 0 && (b[3] == 0 || b[3] == 10) {
		return fmt.Errorf("%s is reserved in its range (the network address, or the cluster DNS at .0.10); pick another address", ip)
	}
	return nil
}

// labRange returns the lab range (1 to lab.Ranges) that a fixed ClusterIP
// belongs to, or 0 for none.
func labRange(clusterIP string) int {
	ip, err := netip.ParseAddr(clusterIP)
	if err != nil || checkFixedClusterIP(clusterIP) != nil {
		return 0
	}
	return int(ip.As4()[1]) - 95
}

// Range returns the lab range the file's fixed ClusterIPs need (1 to
// lab.Ranges), or 0 when no Service asks for one. LoadObjects checks that
// they agree.
func (f *File) Range() int {
	for _, o := range f.Objects {
		if s, ok := o.Obj.(*corev1.Service); ok {
			if r := labRange(primaryClusterIP(s)); r != 0 {
				return r
			}
		}
	}
	return 0
}

// primaryClusterIP is the ClusterIP a Service asks for: clusterIP, or
// clusterIPs[0] when only that is written (the API server fills one from
// the other).
func primaryClusterIP(s *corev1.Service) string {
	if s.Spec.ClusterIP == "" && len(s.Spec.ClusterIPs) > 0 {
		return s.Spec.ClusterIPs[0]
	}
	return s.Spec.ClusterIP
}

// checkOneRange reports fixed ClusterIPs of different lab ranges (a lab
// has one) and a ClusterIP asked for twice (the API server's allocator
// refuses the second).
func checkOneRange(objs objects) error {
	first := 0
	taken := map[string]string{}
	for _, o := range objs {
		s, ok := o.Obj.(*corev1.Service)
		if !ok {
			continue
		}
		ip := primaryClusterIP(s)
		r := labRange(ip)
		switch {
		case r == 0:
			continue
		case first != 0 && r != first:
			return o.Errorf("spec.clusterIP", "%s is in lab range %d (127.%d.0.0/16), but another Service asks for range %d: a lab serves one /16", ip, r, 95+r, first)
		case taken[ip] != "":
			return o.Errorf("spec.clusterIP", "%s is already asked for by Service %s; the API server would refuse it as already allocated", ip, taken[ip])
		}
		first, taken[ip] = r, o.Namespace()+"/"+o.Doc.Name
	}
	return nil
}

// noFixedClusterIPs refuses fixed ClusterIPs in a scenario: each variant
// runs in its own lab on its own range.
func noFixedClusterIPs(objs objects) error {
	for _, o := range objs {
		if s, ok := o.Obj.(*corev1.Service); ok && labRange(primaryClusterIP(s)) != 0 {
			return o.Errorf("spec.clusterIP", "%s: a scenario runs each variant in its own lab on its own address range, so a Service cannot ask for a fixed clusterIP; leave it out (the report shows the ClusterIP each variant got), or use pinlab lab up for fixed addresses", primaryClusterIP(s))
		}
	}
	return nil
}

// checkObjects catches, before anything starts, what the API server would
// reject and what the lab could start but never carry a call through:
// duplicates, undeclared namespaces, invalid objects, pods the kubelet
// cannot run, Services that select no pods, and ports that lead nowhere.
func checkObjects(objs objects) error {
	c := &check{objs: objs}
	return c.all()
}

// check checks a set of objects. What the API server would reject, and
// what the lab cannot run at all, is always an error. What would only
// spoil a run (a Service that selects no pods, a targetPort no pod
// listens on, endpoints whose Service is not in the file) is an error
// for a scenario and, with lenient set, a warning: lab up applies objects
// as kubectl apply does, and the API server takes them.
type check struct {
	objs     objects
	lenient  bool
	warnings []error
}

// spoils returns err, or with lenient set records it as a warning and
// returns nil.
func (c *check) spoils(err error) error {
	if err != nil && c.lenient {
		c.warnings = append(c.warnings, err)
		return nil
	}
	return err
}

func (c *check) all() error {
	objs := c.objs
	if err := objs.checkNames(); err != nil {
		return err
	}
	for _, o := range objs {
		var err error
		switch obj := o.Obj.(type) {
		case *appsv1.Deployment:
			err = objs.checkDeployment(o, obj)
		case *appsv1.StatefulSet:
			err = c.statefulSet(o, obj)
		case *corev1.Service:
			err = c.service(o, obj)
		case *discoveryv1.EndpointSlice:
			err = c.endpointSlice(o, obj)
		default:
			if verr := cluster.Validate(o.Obj); verr != nil {
				err = apiError(o, verr)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkNames reports unnamed and duplicate objects, objects in namespaces
// the file does not declare, and workloads with more pods than a lab runs.
func (objs objects) checkNames() error {
	seen := map[string]Object{}
	for _, o := range objs {
		if o.Doc.Name == "" {
			return o.Errorf("metadata.name", "required")
		}
		key := o.Doc.Kind + "/" + o.Namespace() + "/" + o.Doc.Name
		if prev, ok := seen[key]; ok {
			return o.Errorf("metadata.name", "%s is defined twice (first in document %d)", o.Doc.What(), prev.Doc.Index)
		}
		seen[key] = o
		if w, ok := asWorkload(o.Obj); ok && w.Replicas > plan.MaxReplicas {
			return o.Errorf("spec.replicas", "%d: expected at most %d pods per %s in a lab", w.Replicas, plan.MaxReplicas, w.Kind)
		}
		if o.Doc.Kind != "Namespace" && !objs.namespaceDeclared(o.Namespace()) {
			return o.Errorf("metadata.namespace", "namespace %q is not defined in this file; add a Namespace document (the API server would reject the object)", o.Namespace())
		}
	}
	return nil
}

// namespaceDeclared reports whether namespace ns exists in a lab that
// runs objs: one of the file's Namespaces, or default and kube-system,
// which every lab creates (see cluster.New).
func (objs objects) namespaceDeclared(ns string) bool {
	if ns == metav1.NamespaceDefault || ns == metav1.NamespaceSystem {
		return true
	}
	for _, o := range objs {
		if o.Doc.Kind == "Namespace" && o.Doc.Name == ns {
			return true
		}
	}
	return false
}

func (objs objects) checkDeployment(o Object, d *appsv1.Deployment) error {
	d = d.DeepCopy()
	cluster.DefaultDeployment(d)
	if err := cluster.ValidateDeployment(d); err != nil {
		return apiError(o, err)
	}
	return checkPodSpec(o, &d.Spec.Template.Spec)
}

// checkPodSpec reports a pod template the lab's kubelet cannot run. Probes
// that can never succeed are checked apart (see probes.go): Kubernetes
// accepts them.
func checkPodSpec(o Object, spec *corev1.PodSpec) error {
	if _, err := workload.For(spec); err != nil {
		var se *workload.SpecError
		if errors.As(err, &se) {
			return o.Errorf("spec.template.spec."+se.Field, "%s", se.Msg)
		}
		return o.Errorf("spec.template.spec", "%v", err)
	}
	return nil
}

func (c *check) statefulSet(o Object, s *appsv1.StatefulSet) error {
	s = s.DeepCopy()
	cluster.DefaultStatefulSet(s)
	if err := cluster.ValidateStatefulSet(s); err != nil {
		return apiError(o, err)
	}
	if err := checkPodSpec(o, &s.Spec.Template.Spec); err != nil {
		return err
	}
	// The governing Service gives the pods their DNS names; without it the
	// StatefulSet runs, but <pod>.<svc> never resolves.
	if s.Spec.ServiceName == "" {
		return c.spoils(o.Errorf("spec.serviceName", "required: the headless Service that gives the pods their DNS names"))
	}
	if c.objs.service(o.Namespace(), s.Spec.ServiceName) == nil {
		return c.spoils(o.Errorf("spec.serviceName", "no Service %q in namespace %q in this file; create the governing headless Service", s.Spec.ServiceName, o.Namespace()))
	}
	return nil
}

// endpointSlice checks a hand-written slice as the API server does, and
// that it names a Service of the file that has no selector (slices of a
// selector Service belong to the EndpointSlice controller). The API
// server takes a slice before or without its Service, so the latter is
// for lab run only.
func (c *check) endpointSlice(o Object, es *discoveryv1.EndpointSlice) error {
	if err := cluster.Validate(es); err != nil {
		return apiError(o, err)
	}
	if es.AddressType == discoveryv1.AddressTypeFQDN {
		return c.spoils(o.Errorf("addressType", "FQDN: kube-proxy and the cluster DNS use IPv4 and IPv6 slices only, so nothing uses these endpoints"))
	}
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return c.spoils(o.Errorf("metadata.labels", "label %s is required: it names the Service these endpoints belong to", discoveryv1.LabelServiceName))
	}
	s := c.objs.service(o.Namespace(), svc)
	if s == nil {
		return c.spoils(o.Errorf("metadata.labels", "label %s=%s names no Service in namespace %q in this file, so nothing uses these endpoints", discoveryv1.LabelServiceName, svc, o.Namespace()))
	}
	if len(s.Spec.Selector) > 0 {
		return c.spoils(o.Errorf("metadata.labels", "Service %s has a selector, so the EndpointSlice controller publishes its endpoints; write slices only for Services without one", svc))
	}
	return nil
}

// apiError reports the first field cause of an API validation error.
func apiError(o Object, err error) error {
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Details != nil && len(se.ErrStatus.Details.Causes) > 0 {
		c := se.ErrStatus.Details.Causes[0]
		return o.Errorf(c.Field, "%s (the API server would reject it)", c.Message)
	}
	return o.Errorf("", "%v", err)
}

func (c *check) service(o Object, s *corev1.Service) error {
	objs := c.objs
	s = s.DeepCopy()
	cluster.DefaultService(s)
	if err := cluster.ValidateService(s); err != nil {
		return apiError(o, err)
	}
	if err := checkFixedClusterIP(s.Spec.ClusterIP); err != nil {
		return o.Errorf("spec.clusterIP", "%v", err)
	}
	if len(s.Spec.Selector) == 0 || s.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	backends := objs.backends(o.Namespace(), s)
	if len(backends) == 0 {
		return c.spoils(o.Errorf("spec.selector", "selects no pods: no workload in namespace %q has pod labels matching %v (pod labels here: %s)",
			o.Namespace(), labels.Set(s.Spec.Selector), objs.podLabels(o.Namespace())))
	}
	for i, sp := range s.Spec.Ports {
		if sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		for _, w := range backends {
			if err := checkTargetPort(w, sp); err != nil {
				return c.spoils(o.Errorf(fmt.Sprintf("spec.ports[%d].targetPort", i), "%v", err))
			}
		}
	}
	return nil
}

func (objs objects) service(ns, name string) *corev1.Service {
	if o, ok := objs.serviceObject(ns, name); ok {
		return o.Obj.(*corev1.Service)
	}
	return nil
}

// serviceObject is the file's object of Service ns/name, for errors at
// its lines.
func (objs objects) serviceObject(ns, name string) (Object, bool) {
	for _, o := range objs {
		if s, ok := o.Obj.(*corev1.Service); ok && s.Name == name && o.Namespace() == ns {
			return o, true
		}
	}
	return Object{}, false
}

// backends returns the workloads in namespace ns whose pods the Service
// selects.
func (objs objects) backends(ns string, s *corev1.Service) []owner {
	if len(s.Spec.Selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	var out []owner
	for _, w := range objs.workloads() {
		if w.Namespace == ns && sel.Matches(labels.Set(w.Template.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

func (objs objects) podLabels(ns string) string {
	var out []string
	for _, w := range objs.workloads() {
		if w.Namespace == ns {
			out = append(out, fmt.Sprintf("%s: %v", w.Name, labels.Set(w.Template.Labels)))
		}
	}
	sort.Strings(out)
	return listOrNone(out)
}

// podPort resolves a Service port's targetPort against a workload's pods
// (a name is looked up among the container ports, as the EndpointSlice
// controller does).
func podPort(w owner, sp corev1.ServicePort) (int, error) {
	if sp.TargetPort.Type == intstr.Int {
		if sp.TargetPort.IntVal == 0 {
			return int(sp.Port), nil
		}
		return int(sp.TargetPort.IntVal), nil
	}
	var names []string
	for _, c := range w.Template.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == sp.TargetPort.StrVal && (cp.Protocol == "" || cp.Protocol == sp.Protocol) {
				return int(cp.ContainerPort), nil
			}
			if cp.Name != "" {
				names = append(names, fmt.Sprintf("%s (%s)", cp.Name, cmp.Or(string(cp.Protocol), "TCP")))
			}
		}
	}
	return 0, fmt.Errorf("no %s container port named %q in the pods of %s %s (named ports: %s)", sp.Protocol, sp.TargetPort.StrVal, w.Kind, w.Name, listOrNone(names))
}

// checkTargetPort reports a Service port whose traffic the selected pods
// would refuse.
func checkTargetPort(w owner, sp corev1.ServicePort) error {
	port, err := podPort(w, sp)
	if err != nil {
		return err
	}
	wl, err := workload.For(&w.Template.Spec)
	if err != nil {
		return nil // reported on the workload
	}
	if port != wl.Port && port != wl.HTTPPort {
		listen := fmt.Sprint(wl.Port)
		if wl.HTTPPort != 0 {
			listen = fmt.Sprintf("%d (gRPC) and %d (HTTP)", wl.Port, wl.HTTPPort)
		}
		return fmt.Errorf("resolves to port %d, but the pods of %s %s listen on %s, so every connection would be refused", port, w.Kind, w.Name, listen)
	}
	return nil
}
