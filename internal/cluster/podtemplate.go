package cluster

import (
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validatePodTemplate checks a workload's pod template at path as the API
// server's ValidatePodTemplateSpec does for what the lab reads: the
// template's labels and annotations (all annotations together at most
// 256 KiB, apimachinery's TotalAnnotationSizeLimitB), container names,
// container ports (containerPort 1-65535, hostPort 0-65535, names IANA
// service names, protocols) and the ports of grpc, tcpSocket and httpGet
// probes (a number 1-65535 or a port name), with the API server's
// messages. Ports are int32 in the API; without this a containerPort of
// 70000 would reach the kubelet, which listens on a 16-bit port.
func validatePodTemplate(t *corev1.PodTemplateSpec, path *field.Path) field.ErrorList {
	meta := path.Child("metadata")
	errs := metav1validation.ValidateLabels(t.Labels, meta.Child("labels"))
	errs = append(errs, apivalidation.ValidateAnnotations(t.Annotations, meta.Child("annotations"))...)
	cs := path.Child("spec", "containers")
	for i := range t.Spec.Containers {
		errs = append(errs, validateContainer(&t.Spec.Containers[i], cs.Index(i))...)
	}
	return errs
}

func validateContainer(c *corev1.Container, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), ""))
	} else {
		errs = append(errs, dns1123Label(path.Child("name"), c.Name)...)
	}
	for i, p := range c.Ports {
		pp := path.Child("ports").Index(i)
		errs = append(errs, portNum(pp.Child("containerPort"), int(p.ContainerPort))...)
		if p.HostPort != 0 {
			errs = append(errs, portNum(pp.Child("hostPort"), int(p.HostPort))...)
		}
		if p.Name != "" {
			errs = append(errs, portName(pp.Child("name"), p.Name)...)
		}
		switch p.Protocol {
		case "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), p.Protocol, []string{"TCP", "UDP", "SCTP"}))
		}
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.probe != nil {
			errs = append(errs, validateProbePort(&pr.probe.ProbeHandler, path.Child(pr.name))...)
		}
	}
	return errs
}

// validateProbePort checks the port of a grpc, tcpSocket or httpGet probe.
func validateProbePort(h *corev1.ProbeHandler, path *field.Path) field.ErrorList {
	switch {
	case h.GRPC != nil:
		return portNum(path.Child("grpc", "port"), int(h.GRPC.Port))
	case h.TCPSocket != nil:
		return portNumOrName(path.Child("tcpSocket", "port"), h.TCPSocket.Port)
	case h.HTTPGet != nil:
		return portNumOrName(path.Child("httpGet", "port"), h.HTTPGet.Port)
	}
	return nil
}

func portNum(path *field.Path, n int) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortNum(n) {
		errs = append(errs, field.Invalid(path, n, msg))
	}
	return errs
}

func portName(path *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortName(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

func portNumOrName(path *field.Path, p intstr.IntOrString) field.ErrorList {
	if p.Type == intstr.String {
		return portName(path, p.StrVal)
	}
	return portNum(path, int(p.IntVal))
}
