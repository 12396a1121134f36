package kubelet

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/pinlab/pinlab/internal/pod"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	// PreStop is the container's preStop hook as the lab runs it; nil
	// without one.
	PreStop *Hook
}

// probeFields names the container's probes as JSON fields, with the probe.
func probeFields(c *corev1.Container) []struct {
	field string
	probe *corev1.Probe
} {
	return []struct {
		field string
		probe *corev1.Probe
	}{
		{"containers[0].readinessProbe", c.ReadinessProbe},
		{"containers[0].livenessProbe", c.LivenessProbe},
		{"containers[0].startupProbe", c.StartupProbe},
	}
}

// WorkloadFor checks that spec is a pod the lab's kubelet can run (exactly
// one container, image pinlab, valid pod args, readiness, liveness and
// startup probes of kind grpc or tcpSocket, a preStop hook the lab can run
// (see Hook), no postStart hook, a known restartPolicy) and returns its
// workload. Errors are *SpecError.
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
	for _, pf := range probeFields(c) {
		if p := pf.probe; p != nil && p.GRPC == nil && p.TCPSocket == nil {
			return Workload{}, &SpecError{pf.field, "only grpc and tcpSocket probes are supported in the lab"}
		}
	}
	switch spec.RestartPolicy {
	case "", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		return Workload{}, &SpecError{"restartPolicy", fmt.Sprintf("unknown restartPolicy %q (want Always, OnFailure or Never)", spec.RestartPolicy)}
	}
	hook, err := preStopHook(c, spec.TerminationGracePeriodSeconds)
	if err != nil {
		return Workload{}, err
	}
	names := map[string]bool{}
	for i, cp := range c.Ports {
		if cp.Name != "" && names[cp.Name] {
			return Workload{}, &SpecError{fmt.Sprintf("containers[0].ports[%d].name", i), fmt.Sprintf("port name %q is used twice (the API server would reject it)", cp.Name)}
		}
		names[cp.Name] = true
	}
	w := Workload{Args: a, Port: a.Port, PreStop: hook}
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

// CheckProbePort reports a probe aimed at a port other than the one the
// server listens on: the kubelet runs such a pod, but a readiness or
// startup probe there never succeeds, and a liveness probe there restarts
// the container forever. Errors are *SpecError.
func CheckProbePort(c *corev1.Container, listen int) error {
	for _, pf := range probeFields(c) {
		p := pf.probe
		if p == nil {
			continue
		}
		field, port := pf.field+".grpc.port", 0
		if p.GRPC != nil {
			port = int(p.GRPC.Port)
		} else if p.TCPSocket != nil {
			field = pf.field + ".tcpSocket.port"
			var err error
			if port, err = resolvePort(c, p.TCPSocket.Port); err != nil {
				return &SpecError{field, err.Error()}
			}
		}
		if port != listen {
			return &SpecError{field, fmt.Sprintf("probes port %d, but the server listens on %d, so the probe would never succeed", port, listen)}
		}
	}
	return nil
}

// resolvePort turns a probe's port (number or container port name) into a
// number.
func resolvePort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return int(port.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("probe: no container port named %q", port.StrVal)
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
		StartupDelay:          w.Args.StartupDelay,
		DrainDelay:            w.Args.DrainDelay,
	}, nil
}
