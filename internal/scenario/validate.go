package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/manifest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
			err = f.checkDeployment(o.Doc, obj)
		case *corev1.Service:
			err = f.checkService(o.Doc, obj)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *File) checkDeployment(doc manifest.Document, d *appsv1.Deployment) error {
	d = d.DeepCopy()
	cluster.DefaultDeployment(d)
	if err := cluster.ValidateDeployment(d); err != nil {
		return apiError(doc, err)
	}
	w, err := kubelet.WorkloadFor(&d.Spec.Template.Spec)
	if err == nil {
		err = kubelet.CheckProbePort(&d.Spec.Template.Spec.Containers[0], w.Port)
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
		return doc.Errorf("spec.selector", "selects no pods: no Deployment in namespace %q has pod labels matching %v (pod labels here: %s)",
			namespaceOf(doc), labels.Set(s.Spec.Selector), f.podLabels(namespaceOf(doc)))
	}
	for i, sp := range s.Spec.Ports {
		if sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		for _, d := range backends {
			if err := checkTargetPort(d, sp); err != nil {
				return doc.Errorf(fmt.Sprintf("spec.ports[%d].targetPort", i), "%v", err)
			}
		}
	}
	return nil
}

// backends returns the Deployments in namespace ns whose pods the Service
// selects.
func (f *File) backends(ns string, s *corev1.Service) []*appsv1.Deployment {
	if len(s.Spec.Selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	var out []*appsv1.Deployment
	for _, o := range f.Objects {
		if d, ok := o.Obj.(*appsv1.Deployment); ok && namespaceOf(o.Doc) == ns && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

func (f *File) podLabels(ns string) string {
	var out []string
	for _, o := range f.Objects {
		if d, ok := o.Obj.(*appsv1.Deployment); ok && namespaceOf(o.Doc) == ns {
			out = append(out, fmt.Sprintf("%s: %v", d.Name, labels.Set(d.Spec.Template.Labels)))
		}
	}
	sort.Strings(out)
	return listOrNone(out)
}

// podPort resolves a Service port's targetPort against a Deployment's pods
// (a name is looked up among the container ports, as the EndpointSlice
// controller does).
func podPort(d *appsv1.Deployment, sp corev1.ServicePort) (int, error) {
	if sp.TargetPort.Type == intstr.Int {
		if sp.TargetPort.IntVal == 0 {
			return int(sp.Port), nil
		}
		return int(sp.TargetPort.IntVal), nil
	}
	var names []string
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == sp.TargetPort.StrVal && (cp.Protocol == "" || cp.Protocol == sp.Protocol) {
				return int(cp.ContainerPort), nil
			}
			if cp.Name != "" {
				names = append(names, fmt.Sprintf("%s (%s)", cp.Name, cmp.Or(string(cp.Protocol), "TCP")))
			}
		}
	}
	return 0, fmt.Errorf("no %s container port named %q in the pods of Deployment %s (named ports: %s)", sp.Protocol, sp.TargetPort.StrVal, d.Name, listOrNone(names))
}

// checkTargetPort reports a Service port whose traffic the selected pods
// would refuse.
func checkTargetPort(d *appsv1.Deployment, sp corev1.ServicePort) error {
	port, err := podPort(d, sp)
	if err != nil {
		return err
	}
	w, err := kubelet.WorkloadFor(&d.Spec.Template.Spec)
	if err != nil {
		return nil // reported on the Deployment
	}
	if port != w.Port {
		return fmt.Errorf("resolves to port %d, but the pods of Deployment %s listen on %d, so every connection would be refused", port, d.Name, w.Port)
	}
	return nil
}

// checkClientPort checks that a client's port reaches the Service: a
// ClusterIP client dials a Service port; a headless client dials pod IPs,
// so it needs the pods' port.
func (f *File) checkClientPort(t Target) error {
	s := t.Service
	var ports []string
	for _, sp := range s.Spec.Ports {
		want := int(sp.Port)
		if t.Headless() {
			for _, d := range f.backends(t.Namespace, s) {
				if p, err := podPort(d, sp); err == nil {
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
