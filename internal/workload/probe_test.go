package workload

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestCheckProbePortAllProbes(t *testing.T) {
	c := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}, {Name: "admin", ContainerPort: 9000}}}
	c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("admin")}}}
	var se *SpecError
	err := CheckProbePort(c, 8471)
	if !errors.As(err, &se) {
		t.Fatalf("CheckProbePort = %v, want a SpecError", err)
	}
	if diff := cmp.Diff("containers[0].livenessProbe.tcpSocket.port", se.Field); diff != "" {
		t.Errorf("field (-want +got):\n%s", diff)
	}
}

func TestCheckProbePortHTTP(t *testing.T) {
	probe := func(h corev1.ProbeHandler) *corev1.Probe { return &corev1.Probe{ProbeHandler: h} }
	httpGet := func(path string, port intstr.IntOrString) *corev1.Probe {
		return probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: port}})
	}
	tests := []struct {
		name      string
		args      []string
		probe     *corev1.Probe
		wantField string
	}{
		{name: "healthz by name", probe: httpGet("/healthz", intstr.FromString("http"))},
		{name: "healthz by number", probe: httpGet("/healthz", intstr.FromInt32(8080))},
		{name: "healthz with a query", probe: httpGet("/healthz?verbose=1", intstr.FromInt32(8080))},
		{name: "price with a sku", probe: httpGet("/v1/price?sku=probe", intstr.FromInt32(8080))},
		{name: "http-port arg", args: []string{"--http-port=9000"}, probe: httpGet("/healthz", intstr.FromInt32(9000))},
		{name: "price without a sku", probe: httpGet("/v1/price", intstr.FromInt32(8080)), wantField: "containers[0].readinessProbe.httpGet.path"},
		{name: "unknown path", probe: httpGet("/ready", intstr.FromInt32(8080)), wantField: "containers[0].readinessProbe.httpGet.path"},
		{name: "empty path", probe: httpGet("", intstr.FromInt32(8080)), wantField: "containers[0].readinessProbe.httpGet.path"},
		{name: "httpGet at the gRPC port", probe: httpGet("/healthz", intstr.FromString("grpc")), wantField: "containers[0].readinessProbe.httpGet.port"},
		{name: "httpGet at an unknown port name", probe: httpGet("/healthz", intstr.FromString("web")), wantField: "containers[0].readinessProbe.httpGet.port"},
		{name: "tcpSocket at the HTTP port", probe: probe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}})},
		{name: "grpc at the HTTP port", probe: probe(corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}}), wantField: "containers[0].readinessProbe.grpc.port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.Container{Name: "app", Image: "pinlab", Args: append([]string{"pod", "pricing"}, tt.args...), ReadinessProbe: tt.probe,
				Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}, {Name: "http", ContainerPort: 8080}}}
			if len(tt.args) > 0 {
				c.Ports = c.Ports[:1]
			}
			err := CheckProbePort(c, 8471)
			if tt.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) || se.Field != tt.wantField {
				t.Fatalf("error %v, want a SpecError on %s", err, tt.wantField)
			}
		})
	}
}
