package kubelet

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/pinlab/pinlab/internal/pod"
	corev1 "k8s.io/api/core/v1"
)

// IsPinlabImage reports whether image names the pinlab image, with any
// registry, repository path, tag or digest ("pinlab",
// "ghcr.io/acme/pinlab:v1").
func IsPinlabImage(image string) bool {
	name := image
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	name = path.Base(name)
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	return name == "pinlab"
}

// ContainerArgs returns the pinlab command line of a container: its args,
// after any command that runs the pinlab binary itself.
func ContainerArgs(c *corev1.Container) ([]string, error) {
	if !IsPinlabImage(c.Image) {
		return nil, fmt.Errorf("container %q: image %q is not pinlab; the lab only runs image pinlab with args [pod, <workload>, ...]", c.Name, c.Image)
	}
	args := c.Args
	if len(c.Command) > 0 {
		if path.Base(c.Command[0]) != "pinlab" {
			return nil, fmt.Errorf("container %q: command %q does not run pinlab", c.Name, c.Command)
		}
		args = append(append([]string(nil), c.Command[1:]...), c.Args...)
	}
	return args, nil
}

// SpecError is a pod spec the lab cannot run; Field is the JSON path of
// the problem within the pod spec (e.g. "containers[0].image").
type SpecError struct {
	Field string
	Msg   string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Msg }

// Workload is what the kubelet runs for a pod spec.
type Workload struct {
	Args pod.Args
	// Port is where the server listens: --port, else the container's first
	// TCP containerPort, else pod.DefaultPort.
	Port int
}

// WorkloadFor checks that spec is a pod the lab's kubelet can run (exactly
// one container, image pinlab, valid pod args, readiness probes of kind grpc
// or tcpSocket, no liveness or startup probes yet) and returns its workload.
// Errors are *SpecError.
func WorkloadFor(spec *corev1.PodSpec) (Workload, error) {
	if len(spec.Containers) != 1 {
		return Workload{}, &SpecError{"containers", fmt.Sprintf("%d containers; the lab runs pods with exactly one pinlab container", len(spec.Containers))}
	}
	c := &spec.Containers[0]
	args, err := ContainerArgs(c)
	if err != nil {
		field := "containers[0].image"
		if IsPinlabImage(c.Image) {
			field = "containers[0].command"
		}
		return Workload{}, &SpecError{field, err.Error()}
	}
	a, err := pod.ParseArgs(args)
	if err != nil {
		return Workload{}, &SpecError{"containers[0].args", fmt.Sprintf("container %q: %v", c.Name, err)}
	}
	if p := c.ReadinessProbe; p != nil && p.GRPC == nil && p.TCPSocket == nil {
		return Workload{}, &SpecError{"containers[0].readinessProbe", "only grpc and tcpSocket readiness probes are supported in the lab"}
	}
	if c.LivenessProbe != nil {
		return Workload{}, &SpecError{"containers[0].livenessProbe", "liveness probes are not supported in the lab yet"}
	}
	if c.StartupProbe != nil {
		return Workload{}, &SpecError{"containers[0].startupProbe", "startup probes are not supported in the lab yet"}
	}
	names := map[string]bool{}
	for i, cp := range c.Ports {
		if cp.Name != "" && names[cp.Name] {
			return Workload{}, &SpecError{fmt.Sprintf("containers[0].ports[%d].name", i), fmt.Sprintf("port name %q is used twice (the API server would reject it)", cp.Name)}
		}
		names[cp.Name] = true
	}
	w := Workload{Args: a, Port: a.Port}
	if w.Port == 0 {
		w.Port = pod.DefaultPort
		for _, cp := range c.Ports {
			if cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP {
				w.Port = int(cp.ContainerPort)
				break
			}
		}
	}
	return w, nil
}

// CheckProbePort reports a readiness probe aimed at a port other than the
// one the server listens on: the kubelet runs such a pod, but it can never
// turn Ready. Errors are *SpecError.
func CheckProbePort(c *corev1.Container, listen int) error {
	p := c.ReadinessProbe
	if p == nil {
		return nil
	}
	field, port := "containers[0].readinessProbe.grpc.port", 0
	if p.GRPC != nil {
		port = int(p.GRPC.Port)
	} else {
		field = "containers[0].readinessProbe.tcpSocket.port"
		pr := prober{probe: p, pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{*c}}}}
		var err error
		if port, err = pr.resolvePort(p.TCPSocket.Port); err != nil {
			return &SpecError{field, err.Error()}
		}
	}
	if port != listen {
		return &SpecError{field, fmt.Sprintf("probes port %d, but the server listens on %d, so the pod would never be Ready", port, listen)}
	}
	return nil
}

// containerConfig turns a pod into its server's config at ip.
func containerConfig(p *corev1.Pod, ip netip.Addr) (pod.Config, error) {
	w, err := WorkloadFor(&p.Spec)
	if err != nil {
		return pod.Config{}, err
	}
	return pod.Config{
		Name:                  p.Name,
		Namespace:             p.Namespace,
		Addr:                  netip.AddrPortFrom(ip, uint16(w.Port)),
		MaxConnectionAge:      w.Args.MaxConnectionAge,
		MaxConnectionAgeGrace: w.Args.MaxConnectionAgeGrace,
	}, nil
}
