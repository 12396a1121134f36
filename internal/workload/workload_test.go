package workload

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestIsPinlabImage(t *testing.T) {
	tests := []struct {
		image string
		want  bool
	}{
		{"pinlab", true}, {"pinlab:latest", true}, {"ghcr.io/acme/pinlab:v1", true},
		{"localhost:5000/pinlab@sha256:abc", true}, {"pinlabs", false}, {"nginx", false}, {"pinlab/other", false},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			if got := IsPinlabImage(tt.image); got != tt.want {
				t.Errorf("IsPinlabImage(%q) = %v, want %v", tt.image, got, tt.want)
			}
		})
	}
}

func TestContainerArgs(t *testing.T) {
	tests := []struct {
		name    string
		c       corev1.Container
		want    string
		wantErr string
	}{
		{name: "args only", c: corev1.Container{Name: "a", Image: "pinlab", Args: []string{"pod", "pricing"}}, want: "pod pricing"},
		{name: "command runs pinlab", c: corev1.Container{Name: "a", Image: "pinlab", Command: []string{"/usr/bin/pinlab", "pod"}, Args: []string{"pricing"}}, want: "pod pricing"},
		{name: "other image", c: corev1.Container{Name: "a", Image: "nginx"}, wantErr: `image "nginx" is not pinlab`},
		{name: "other command", c: corev1.Container{Name: "a", Image: "pinlab", Command: []string{"sh"}}, wantErr: "does not run pinlab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ContainerArgs(&tt.c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestForProbesAndHooks(t *testing.T) {
	grpcProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471}}}
	tcpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("grpc")}}}
	execProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	tests := []struct {
		name      string
		mod       func(*corev1.Container, *corev1.PodSpec)
		wantField string
		wantHook  time.Duration
	}{
		{name: "liveness and startup probes", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.LivenessProbe, c.StartupProbe, c.ReadinessProbe = grpcProbe, tcpProbe, grpcProbe
		}},
		{name: "exec liveness probe", mod: func(c *corev1.Container, _ *corev1.PodSpec) { c.LivenessProbe = execProbe }, wantField: "containers[0].livenessProbe"},
		{name: "exec startup probe", mod: func(c *corev1.Container, _ *corev1.PodSpec) { c.StartupProbe = execProbe }, wantField: "containers[0].startupProbe"},
		{name: "preStop sleep", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}}
		}, wantHook: 3 * time.Second},
		{name: "postStart", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
		}, wantField: "containers[0].lifecycle.postStart"},
		// Ports are int32 in the API; 70000 must not wrap to 4464 (issue 15).
		{name: "containerPort above 65535", mod: func(c *corev1.Container, _ *corev1.PodSpec) { c.Ports[0].ContainerPort = 70000 }, wantField: "containers[0].ports[0].containerPort"},
		{name: "grpc probe port above 65535", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471 + 65536}}}
		}, wantField: "containers[0].readinessProbe.grpc.port"},
		{name: "unknown restartPolicy", mod: func(_ *corev1.Container, s *corev1.PodSpec) { s.RestartPolicy = "Sometimes" }, wantField: "restartPolicy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			grace := int64(30)
			spec := corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
				Name: "app", Image: "pinlab", Args: []string{"pod", "pricing"},
				Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}},
			}}}
			tt.mod(&spec.Containers[0], &spec)
			w, err := For(&spec)
			if err == nil {
				err = CheckProbePort(&spec.Containers[0], w.Port)
			}
			if tt.wantField != "" {
				var se *SpecError
				if !errors.As(err, &se) || se.Field != tt.wantField {
					t.Fatalf("error %v, want a SpecError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got time.Duration
			if w.PreStop != nil {
				got = w.PreStop.Sleep
			}
			if got != tt.wantHook {
				t.Errorf("preStop sleep %v, want %v", got, tt.wantHook)
			}
			if err := CheckProbePort(&spec.Containers[0], w.Port); err != nil {
				t.Errorf("CheckProbePort: %v", err)
			}
		})
	}
}

func TestForHTTPPort(t *testing.T) {
	httpGet := func(port intstr.IntOrString, mod func(*corev1.HTTPGetAction)) *corev1.Probe {
		g := &corev1.HTTPGetAction{Path: "/healthz", Port: port}
		if mod != nil {
			mod(g)
		}
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: g}}
	}
	grpcPort := corev1.ContainerPort{Name: "grpc", ContainerPort: 8471}
	httpPort := corev1.ContainerPort{Name: "http", ContainerPort: 8080}
	tests := []struct {
		name      string
		args      []string
		ports     []corev1.ContainerPort
		probe     *corev1.Probe
		wantPorts [2]int // gRPC, HTTP
		wantField string
	}{
		{name: "no HTTP port", ports: []corev1.ContainerPort{grpcPort}, wantPorts: [2]int{8471, 0}},
		{name: "http-port arg", args: []string{"--http-port=9000"}, ports: []corev1.ContainerPort{grpcPort}, wantPorts: [2]int{8471, 9000}},
		{name: "port named http", ports: []corev1.ContainerPort{grpcPort, httpPort}, wantPorts: [2]int{8471, 8080}},
		{name: "port named http first", ports: []corev1.ContainerPort{httpPort, grpcPort}, wantPorts: [2]int{8471, 8080}},
		{name: "only a port named http", ports: []corev1.ContainerPort{httpPort}, wantPorts: [2]int{DefaultPort, 8080}},
		{name: "arg wins over the named port", args: []string{"--http-port=9000"}, ports: []corev1.ContainerPort{httpPort, grpcPort}, wantPorts: [2]int{8080, 9000}},
		{name: "UDP port named http", ports: []corev1.ContainerPort{grpcPort, {Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolUDP}}, wantPorts: [2]int{8471, 0}},
		{name: "gRPC port is the named http port", args: []string{"--port=8080"}, ports: []corev1.ContainerPort{httpPort}, wantField: "containers[0].args"},
		{name: "http-port is the default gRPC port", args: []string{"--http-port=8471"}, wantField: "containers[0].args"},
		{name: "bad http-port", args: []string{"--http-port=0"}, wantField: "containers[0].args"},
		{name: "httpGet probe", ports: []corev1.ContainerPort{grpcPort, httpPort}, probe: httpGet(intstr.FromString("http"), nil), wantPorts: [2]int{8471, 8080}},
		{name: "httpGet probe without HTTP port", ports: []corev1.ContainerPort{grpcPort}, probe: httpGet(intstr.FromInt32(8471), nil), wantField: "containers[0].readinessProbe.httpGet"},
		{name: "httpGet probe HTTPS", ports: []corev1.ContainerPort{grpcPort, httpPort},
			probe: httpGet(intstr.FromString("http"), func(g *corev1.HTTPGetAction) { g.Scheme = corev1.URISchemeHTTPS }), wantField: "containers[0].readinessProbe.httpGet.scheme"},
		{name: "httpGet probe with host", ports: []corev1.ContainerPort{grpcPort, httpPort},
			probe: httpGet(intstr.FromString("http"), func(g *corev1.HTTPGetAction) { g.Host = "10.0.0.1" }), wantField: "containers[0].readinessProbe.httpGet.host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "pinlab",
				Args: append([]string{"pod", "pricing"}, tt.args...), Ports: tt.ports, ReadinessProbe: tt.probe}}}
			w, err := For(&spec)
			if tt.wantField != "" {
				var se *SpecError
				if !errors.As(err, &se) || se.Field != tt.wantField {
					t.Fatalf("error %v, want a SpecError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantPorts, [2]int{w.Port, w.HTTPPort}); diff != "" {
				t.Errorf("ports [gRPC HTTP] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestForCommand: a container of the image's load client or xDS control
// plane is told apart by its first pinlab arg, as For reads a pod's;
// ForCommand checks the pod but leaves the flags to the command.
func TestForCommand(t *testing.T) {
	tcpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9480)}}}
	httpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(9480)}}}
	tests := []struct {
		name      string
		mod       func(*corev1.PodSpec)
		isLoad    bool
		command   string // when not isLoad
		wantField string
		wantHook  time.Duration
	}{
		{name: "args", isLoad: true},
		{name: "bad flags are the client's", mod: func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"load", "--rate", "fast"} }, isLoad: true},
		{name: "the command runs pinlab load", mod: func(s *corev1.PodSpec) {
			s.Containers[0].Command, s.Containers[0].Args = []string{"/pinlab", "load"}, []string{"--rate", "5"}
		}, isLoad: true},
		{name: "a pod", mod: func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"pod", "pricing"} }, wantField: "containers[0].args"},
		{name: "xds serve", mod: func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"xds", "serve", "--listen", ":18000"} }, command: XDSCommand},
		{name: "xds serve's httpGet probe", mod: func(s *corev1.PodSpec) {
			s.Containers[0].Args, s.Containers[0].ReadinessProbe = []string{"xds", "serve"}, httpProbe
		}, command: XDSCommand, wantField: "containers[0].readinessProbe.httpGet"},
		{name: "another image", mod: func(s *corev1.PodSpec) { s.Containers[0].Image = "busybox" }, wantField: "containers[0].args"},
		{name: "another binary", mod: func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"/bin/sh", "load"} }, wantField: "containers[0].args"},
		{name: "two containers", mod: func(s *corev1.PodSpec) { s.Containers = append(s.Containers, s.Containers[0]) }, wantField: "containers[0].args"},
		{name: "a tcpSocket probe", mod: func(s *corev1.PodSpec) { s.Containers[0].ReadinessProbe = tcpProbe }, isLoad: true},
		{name: "an httpGet probe", mod: func(s *corev1.PodSpec) { s.Containers[0].LivenessProbe = httpProbe }, isLoad: true, wantField: "containers[0].livenessProbe.httpGet"},
		{name: "preStop sleep", mod: func(s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}}
		}, isLoad: true, wantHook: 2 * time.Second},
		{name: "unknown restartPolicy", mod: func(s *corev1.PodSpec) { s.RestartPolicy = "Sometimes" }, isLoad: true, wantField: "restartPolicy"},
		{name: "a port twice", mod: func(s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{Name: "events", ContainerPort: 9480}, {Name: "events", ContainerPort: 9481}}
		}, isLoad: true, wantField: "containers[0].ports[1].name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			grace := int64(30)
			spec := corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
				Name: "load", Image: "pinlab", Args: []string{"load", "--target", "dns:///pricing:8471", "--rate", "5", "--duration", "1s"},
			}}}
			if tt.mod != nil {
				tt.mod(&spec)
			}
			if got := IsLoad(&spec); got != tt.isLoad {
				t.Errorf("IsLoad = %v, want %v", got, tt.isLoad)
			}
			want := tt.command
			if tt.isLoad {
				want = LoadCommand
			}
			if got := Command(&spec); got != want {
				t.Errorf("Command = %q, want %q", got, want)
			}
			w, err := ForCommand(&spec)
			if tt.wantField != "" {
				var se *SpecError
				if !errors.As(err, &se) || se.Field != tt.wantField {
					t.Fatalf("error %v, want a SpecError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var hook time.Duration
			if w.PreStop != nil {
				hook = w.PreStop.Sleep
			}
			if w.Port != 0 || w.HTTPPort != 0 || w.MetricsPort != 0 || hook != tt.wantHook {
				t.Errorf("container %+v (preStop %v), want no ports and preStop %v", w, hook, tt.wantHook)
			}
			if _, err := For(&spec); err == nil {
				t.Error("For takes a load client's pod")
			}
		})
	}
}
