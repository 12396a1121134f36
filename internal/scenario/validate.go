package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/manifest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkWorkloads catches, before anything starts, what the API server
// would reject and what the lab could start but never carry a call through:
// pods the kubelet cannot run, Services that select no pods, and ports that
// lead nowhere.
func (f *File) checkWorkloads() error {
	for _, o := range f.Objects {
		var err error
		switch obj := o.Obj.(type) {
		case *appsv1.Deployment:
			d := obj.DeepCopy()
			cluster.DefaultDeployment(d)
			if err = cluster.ValidateDeployment(d); err == nil {
				err = checkPodSpec(o.Doc, &d.Spec.Template.Spec)
			} else {
				err = apiError(o.Doc, err)
			}
		case *appsv1.StatefulSet:
			err = f.checkStatefulSet(o.Doc, obj)
		case *corev1.Service:
			err = f.checkService(o.Doc, obj)
		case *discoveryv1.EndpointSlice:
			err = f.checkEndpointSlice(o.Doc, obj)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkPodSpec reports a pod template the lab's kubelet cannot run or that
// could never turn Ready.
func checkPodSpec(doc manifest.Document, spec *corev1.PodSpec) error {
	w, err := kubelet.WorkloadFor(spec)
	if err == nil {
		err = kubelet.CheckProbePort(&spec.Containers[0], w.Port)
	}
	if err != nil {
		var se *kubelet.SpecError
		if errors.As(err, &se) {
			return doc.Errorf("spec.template.spec."+se.Field, "%s", se.Msg)
		}
		return doc.Errorf("spec.template.spec", "%v", err)
	}
	return nil
}

func (f *File) checkStatefulSet(doc manifest.Document, s *appsv1.StatefulSet) error {
	s = s.DeepCopy()
	cluster.DefaultStatefulSet(s)
	if err := cluster.ValidateStatefulSet(s); err != nil {
		return apiError(doc, err)
	}
	if err := checkPodSpec(doc, &s.Spec.Template.Spec); err != nil {
		return err
	}
	// The governing Service gives the pods their DNS names; without it the
	// StatefulSet runs, but <pod>.<svc> never resolves.
	if s.Spec.ServiceName == "" {
		return doc.Errorf("spec.serviceName", "required: the headless Service that gives the pods their DNS names")
	}
	if f.service(namespaceOf(doc), s.Spec.ServiceName) == nil {
		return doc.Errorf("spec.serviceName", "no Service %q in namespace %q in this file; create the governing headless Service", s.Spec.ServiceName, namespaceOf(doc))
	}
	return nil
}

// checkEndpointSlice checks a hand-written slice: it must name an existing
// Service, which should have no selector (slices of a selector Service
// belong to the EndpointSlice controller).
func (f *File) checkEndpointSlice(doc manifest.Document, es *discoveryv1.EndpointSlice) error {
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return doc.Errorf("metadata.labels", "label %s is required: it names the Service these endpoints belong to", discoveryv1.LabelServiceName)
	}
	s := f.service(namespaceOf(doc), svc)
	if s == nil {
		return doc.Errorf("metadata.labels", "label %s=%s names no Service in namespace %q in this file", discoveryv1.LabelServiceName, svc, namespaceOf(doc))
	}
	if len(s.Spec.Selector) > 0 {
		return doc.Errorf("metadata.labels", "Service %s has a selector, so the EndpointSlice controller publishes its endpoints; write slices only for Services without one", svc)
	}
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
	default:
		return doc.Errorf("addressType", "%q: expected IPv4 or IPv6", es.AddressType)
	}
	for i, ep := range es.Endpoints {
		if len(ep.Addresses) == 0 {
			return doc.Errorf(fmt.Sprintf("endpoints[%d].addresses", i), "at least one address is required")
		}
		for j, a := range ep.Addresses {
			ip, err := netip.ParseAddr(a)
			if err != nil || ip.Is4() != (es.AddressType == discoveryv1.AddressTypeIPv4) {
				return doc.Errorf(fmt.Sprintf("endpoints[%d].addresses[%d]", i, j), "%q is not an %s address", a, es.AddressType)
			}
		}
	}
	return nil
}

// apiError reports the first field cause of an API validation error.
func apiError(doc manifest.Document, err error) error {
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Details != nil && len(se.ErrStatus.Details.Causes) > 0 {
		c := se.ErrStatus.Details.Causes[0]
		return doc.Errorf(c.Field, "%s (the API server would reject it)", c.Message)
	}
	return doc.Errorf("", "%v", err)
}

func (f *File) checkService(doc manifest.Document, s *corev1.Service) error {
	s = s.DeepCopy()
	cluster.DefaultService(s)
	if err := cluster.ValidateService(s); err != nil {
		return apiError(doc, err)
	}
	if len(s.Spec.Selector) == 0 || s.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	backends := f.backends(namespaceOf(doc), s)
	if len(backends) == 0 {
		return doc.Errorf("spec.selector", "selects no pods: no workload in namespace %q has pod labels matching %v (pod labels here: %s)",
			namespaceOf(doc), labels.Set(s.Spec.Selector), f.podLabels(namespaceOf(doc)))
	}
	for i, sp := range s.Spec.Ports {
		if sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		for _, w := range backends {
			if err := checkTargetPort(w, sp); err != nil {
				return doc.Errorf(fmt.Sprintf("spec.ports[%d].targetPort", i), "%v", err)
			}
		}
	}
	return nil
}

// backends returns the workloads in namespace ns whose pods the Service
// selects.
func (f *File) backends(ns string, s *corev1.Service) []workload {
	if len(s.Spec.Selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	var out []workload
	for _, w := range f.workloads() {
		if w.Namespace == ns && sel.Matches(labels.Set(w.Template.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

func (f *File) podLabels(ns string) string {
	var out []string
	for _, w := range f.workloads() {
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
func podPort(w workload, sp corev1.ServicePort) (int, error) {
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
func checkTargetPort(w workload, sp corev1.ServicePort) error {
	port, err := podPort(w, sp)
	if err != nil {
		return err
	}
	wl, err := kubelet.WorkloadFor(&w.Template.Spec)
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

// checkClientPort checks that a client's port reaches the Service: a
// ClusterIP client dials a Service port; a headless client dials pod IPs,
// so it needs the pods' port. Selector-less headless Services are not
// checked: their slices may list any ports.
func (f *File) checkClientPort(t Target) error {
	s := t.Service
	if t.Headless() && len(s.Spec.Selector) == 0 {
		return nil
	}
	var ports []string
	for _, sp := range s.Spec.Ports {
		want := int(sp.Port)
		if t.Headless() {
			for _, w := range f.backends(t.Namespace, s) {
				if p, err := podPort(w, sp); err == nil {
					want = p
				}
			}
		}
		if want == t.Port {
			return nil
		}
		ports = append(ports, fmt.Sprint(want))
	}
	if t.Headless() {
		return fmt.Errorf("the Service %s is headless: clients dial the pods' IPs directly, so the port must be the pods' port (%s), not %d",
			s.Name, strings.Join(ports, " or "), t.Port)
	}
	return fmt.Errorf("the Service %s has no port %d (ports: %s)", s.Name, t.Port, strings.Join(ports, ", "))
}
