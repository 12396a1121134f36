package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ptr[T any](v T) *T { return &v }

func slice(hostname string, addrs ...string) *discoveryv1.EndpointSlice {
	ep := discoveryv1.Endpoint{Addresses: addrs}
	if hostname != "" {
		ep.Hostname = ptr(hostname)
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "legacy-1", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "legacy"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{ep},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr(int32(8471))}},
	}
}

// causeField returns the field of the first cause of an Invalid error.
func causeField(err error) string {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Details == nil || len(se.ErrStatus.Details.Causes) == 0 {
		return ""
	}
	return se.ErrStatus.Details.Causes[0].Field
}

// TestValidateNames checks metadata.name and the other fields the API
// server validates by name rules, with the field each error names.
func TestValidateNames(t *testing.T) {
	sts := func(name string) *appsv1.StatefulSet {
		d := deployment(name, 1)
		return &appsv1.StatefulSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.StatefulSetSpec{
			Replicas: d.Spec.Replicas, Selector: d.Spec.Selector, Template: d.Spec.Template, ServiceName: name}}
	}
	tests := []struct {
		name      string
		obj       runtime.Object
		wantField string // "" means valid
		wantMsg   string
	}{
		{name: "service ok", obj: service("pricing", false)},
		{name: "service underscore", obj: service("Bad_Name", false), wantField: "metadata.name", wantMsg: "DNS-1035 label"},
		{name: "service unknown affinity", obj: func() *corev1.Service {
			s := service("p", false)
			s.Spec.SessionAffinity = "Sticky"
			return s
		}(), wantField: "spec.sessionAffinity", wantMsg: "Unsupported value"},
		{name: "service zero affinity timeout", obj: func() *corev1.Service {
			s := service("p", false)
			zero := int32(0)
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &zero}}
			return s
		}(), wantField: "spec.sessionAffinityConfig.clientIP.timeoutSeconds", wantMsg: "greater than 0"},
		{name: "service leading digit", obj: service("1pricing", false), wantField: "metadata.name", wantMsg: "DNS-1035 label"},
		{name: "service dots", obj: service("a.b", false), wantField: "metadata.name", wantMsg: "DNS-1035 label"},
		{name: "service bad port name", obj: func() *corev1.Service { s := service("p", false); s.Spec.Ports[0].Name = "GRPC"; return s }(),
			wantField: "spec.ports[0].name", wantMsg: "RFC 1123 label"},
		{name: "service bad label value", obj: func() *corev1.Service { s := service("p", false); s.Labels = map[string]string{"a": "b c"}; return s }(),
			wantField: "metadata.labels", wantMsg: "a valid label"},
		{name: "service bad namespace", obj: func() *corev1.Service { s := service("p", false); s.Namespace = "Shop"; return s }(),
			wantField: "metadata.namespace", wantMsg: "RFC 1123 label"},
		{name: "deployment dotted ok", obj: deployment("pricing.v2", 1)},
		{name: "deployment upper", obj: deployment("Pricing", 1), wantField: "metadata.name", wantMsg: "RFC 1123 subdomain"},
		{name: "statefulset ok", obj: sts("db")},
		{name: "statefulset dots", obj: sts("db.v2"), wantField: "metadata.name", wantMsg: "must not contain dots"},
		{name: "namespace ok", obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "data"}}},
		{name: "namespace dots", obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "data.v2"}}, wantField: "metadata.name", wantMsg: "must not contain dots"},
		{name: "slice ok", obj: slice("db-0", "192.0.2.10")},
		{name: "slice hostname with dots", obj: slice("a.b.c", "192.0.2.10"), wantField: "endpoints[0].hostname", wantMsg: "must not contain dots (a DNS-1123 label"},
		{name: "slice hostname upper case", obj: slice("UPPER", "192.0.2.10"), wantField: "endpoints[0].hostname", wantMsg: "RFC 1123 label"},
		{name: "slice IPv6 in IPv4 slice", obj: slice("", "2001:db8::1"), wantField: "endpoints[0].addresses[0]", wantMsg: "valid IPv4"},
		{name: "slice no addresses", obj: slice(""), wantField: "endpoints[0].addresses", wantMsg: "at least 1"},
		{name: "slice bad name", obj: func() *discoveryv1.EndpointSlice { s := slice(""); s.Name = "Legacy_1"; return s }(),
			wantField: "metadata.name", wantMsg: "RFC 1123 subdomain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.obj)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want an error on %s", tt.wantField)
			}
			if got := causeField(err); got != tt.wantField || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Validate = %v (field %q); want field %q and %q", err, got, tt.wantField, tt.wantMsg)
			}
		})
	}
}

// TestCreateRejectsBadNames: the API's create path applies the same rules,
// for kinds scenario files do not check before start too.
func TestCreateRejectsBadNames(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		create func() error
		field  string
	}{
		{name: "Service", field: "metadata.name", create: func() error {
			_, err := c.Client().CoreV1().Services("shop").Create(ctx, service("Bad_Name", false), metav1.CreateOptions{})
			return err
		}},
		{name: "Namespace", field: "metadata.name", create: func() error {
			_, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "No"}}, metav1.CreateOptions{})
			return err
		}},
		{name: "EndpointSlice hostname", field: "endpoints[0].hostname", create: func() error {
			_, err := c.Client().DiscoveryV1().EndpointSlices("shop").Create(ctx, slice("a.b.c", "192.0.2.10"), metav1.CreateOptions{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.create()
			if !apierrors.IsInvalid(err) || causeField(err) != tt.field {
				t.Errorf("create = %v; want Invalid on %s", err, tt.field)
			}
		})
	}
}

// TestValidatePodTemplate: ports are int32 in the API and 16 bits on the
// wire; the API server refuses what does not fit, and annotations beyond
// its 256 KiB total (issue 15).
func TestValidatePodTemplate(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(*corev1.PodTemplateSpec)
		wantField string // "" means valid
		wantMsg   string
	}{
		{name: "ok", edit: func(*corev1.PodTemplateSpec) {}},
		{name: "containerPort 70000", edit: func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Ports[0].ContainerPort = 70000 },
			wantField: "spec.template.spec.containers[0].ports[0].containerPort", wantMsg: "between 1 and 65535"},
		{name: "containerPort 0", edit: func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 },
			wantField: "spec.template.spec.containers[0].ports[0].containerPort", wantMsg: "between 1 and 65535"},
		{name: "hostPort 65536", edit: func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Ports[0].HostPort = 65536 },
			wantField: "spec.template.spec.containers[0].ports[0].hostPort", wantMsg: "between 1 and 65535"},
		{name: "port name too long", edit: func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Ports[0].Name = "a-very-long-port-name" },
			wantField: "spec.template.spec.containers[0].ports[0].name", wantMsg: "no more than 15"},
		{name: "grpc probe port 70000", edit: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 70000}}}
		}, wantField: "spec.template.spec.containers[0].readinessProbe.grpc.port", wantMsg: "between 1 and 65535"},
		{name: "tcp probe port -1", edit: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(-1)}}}
		}, wantField: "spec.template.spec.containers[0].livenessProbe.tcpSocket.port", wantMsg: "between 1 and 65535"},
		{name: "http probe port name", edit: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("Bad_Name")}}}
		}, wantField: "spec.template.spec.containers[0].startupProbe.httpGet.port", wantMsg: "alpha-numeric"},
		{name: "container without a name", edit: func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Name = "" },
			wantField: "spec.template.spec.containers[0].name", wantMsg: "Required"},
		{name: "annotations over 256 KiB", edit: func(p *corev1.PodTemplateSpec) {
			p.Annotations = map[string]string{"a": strings.Repeat("x", 256<<10)}
		}, wantField: "spec.template.metadata.annotations", wantMsg: "may not be more than 262144 bytes"},
		{name: "annotations of 256 KiB", edit: func(p *corev1.PodTemplateSpec) {
			p.Annotations = map[string]string{"a": strings.Repeat("x", 256<<10-1)}
		}},
		{name: "bad template label", edit: func(p *corev1.PodTemplateSpec) { p.Labels = map[string]string{"app": "pricing", "x": "a b"} },
			wantField: "spec.template.metadata.labels", wantMsg: "a valid label"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deployment("pricing", 1)
			tt.edit(&d.Spec.Template)
			s := &appsv1.StatefulSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.StatefulSetSpec{
				Replicas: d.Spec.Replicas, Selector: d.Spec.Selector, Template: d.Spec.Template, ServiceName: "pricing"}}
			for _, obj := range []runtime.Object{d, s} {
				err := Validate(obj)
				if tt.wantField == "" {
					if err != nil {
						t.Fatalf("Validate(%T) = %v, want nil", obj, err)
					}
					continue
				}
				if got := causeField(err); got != tt.wantField || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("Validate(%T) = %v (field %q); want field %q and %q", obj, err, got, tt.wantField, tt.wantMsg)
				}
			}
		})
	}
}
