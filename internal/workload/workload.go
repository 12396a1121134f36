// Package workload is the contract between a pod spec and the pinlab
// image: what makes a container a pinlab workload (IsPinlabImage,
// ContainerArgs), how its command line reads (Args, ParseArgs), which ports
// its servers listen on and which probes and hooks the lab can run for it
// (For, CheckProbePort), which connection ages grpc-go can take
// (CheckConnectionAge), and which containers run another of the image's
// commands instead, its load client or its xDS control plane (Command,
// ForCommand). It is pure: it reads k8s.io/api objects and
// returns values or errors, and runs nothing. Package kubelet runs what For
// returns, with the servers of package pod; package scenario uses the same
// checks to refuse a file before anything starts.
package workload

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// IsPinlabImage reports whether image names the pinlab image, with any
// registry, repository path, tag or digest ("pinlab",
// "ghcr.io/acme/pinlab:v1"); "pinlabs" and "pinlab/other" are not.
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
// after any command that runs the pinlab binary itself (command
// ["/usr/bin/pinlab", "pod"] with args ["pricing"] is ["pod", "pricing"]),
// as the container runtime joins a container's command and args. Errors
// name the container: an image other than pinlab, or a command that runs
// another binary.
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

// SpecError is a pod spec the lab cannot run, or a probe in it that can
// never succeed; Field is the JSON path of the problem within the pod spec
// (e.g. "containers[0].image") and Msg says what is wrong there.
type SpecError struct {
	Field string
	Msg   string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Msg }

// HTTPPortName is the name of the containerPort that gives a pod its
// HTTP/1.1 and WebSocket server when its args have no --http-port.
const HTTPPortName = "http"

// MetricsPortName is the name of the containerPort that gives a pod its
// Prometheus metrics server when its args have no --metrics-port.
const MetricsPortName = "metrics"

// Container is the pinlab container of a pod spec as the lab runs it: its
// command line and the ports and hook resolved from it and the spec.
type Container struct {
	Args Args
	// Port is where the gRPC server listens: --port, else the container's
	// first TCP containerPort other than HTTPPort and MetricsPort, else
	// DefaultPort.
	Port int
	// HTTPPort is where the pod's HTTP/1.1 and WebSocket server
	// (pod.WebServer) listens beside the gRPC server: --http-port, else the
	// container's TCP containerPort named "http" (HTTPPortName), else 0:
	// the pod serves gRPC only.
	HTTPPort int
	// MetricsPort is where the pod's Prometheus metrics server listens
	// (GET /metrics): --metrics-port, else the container's TCP
	// containerPort named "metrics" (MetricsPortName), else 0: no metrics
	// server.
	MetricsPort int
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

// For checks that spec is a pod the lab's kubelet can run (exactly one
// container, image pinlab, valid pod args, containerPorts of 1 to 65535
// with distinct names, distinct gRPC, HTTP and metrics ports, readiness,
// liveness and startup probes of kind grpc, tcpSocket or, for a pod with an
// HTTP port, httpGet (scheme HTTP, no host), a preStop hook the lab can run
// (see Hook), no postStart hook, a known restartPolicy) and returns its
// container. It does not check where probes point (CheckProbePort does):
// Kubernetes runs such pods. Errors are *SpecError.
func For(spec *corev1.PodSpec) (Container, error) {
	if len(spec.Containers) != 1 {
		return Container{}, &SpecError{"containers", fmt.Sprintf("%d containers; the lab runs pods with exactly one pinlab container", len(spec.Containers))}
	}
	c := &spec.Containers[0]
	args, err := ContainerArgs(c)
	if err != nil {
		field := "containers[0].image"
		if IsPinlabImage(c.Image) {
			field = "containers[0].command"
		}
		return Container{}, &SpecError{field, err.Error()}
	}
	a, err := ParseArgs(args)
	if err != nil {
		return Container{}, &SpecError{"containers[0].args", fmt.Sprintf("container %q: %v", c.Name, err)}
	}
	if err := checkPorts(c); err != nil {
		return Container{}, err
	}
	w := Container{Args: a}
	w.Port, w.HTTPPort = servingPorts(c, a)
	w.MetricsPort = metricsPort(c, a)
	if w.HTTPPort != 0 && w.HTTPPort == w.Port {
		return Container{}, &SpecError{"containers[0].args", fmt.Sprintf("container %q: the HTTP port %d is also the gRPC port; give --port or --http-port another one", c.Name, w.Port)}
	}
	if w.MetricsPort != 0 && (w.MetricsPort == w.Port || w.MetricsPort == w.HTTPPort) {
		return Container{}, &SpecError{"containers[0].args", fmt.Sprintf("container %q: the metrics port %d is also the gRPC or HTTP port; give --metrics-port or the %q containerPort another one", c.Name, w.MetricsPort, MetricsPortName)}
	}
	if err := checkRun(spec, &w); err != nil {
		return Container{}, err
	}
	return w, nil
}

// checkPorts checks the containerPorts of c: numbers of 1 to 65535,
// distinct names.
func checkPorts(c *corev1.Container) error {
	names := map[string]bool{}
	for i, cp := range c.Ports {
		if _, err := portNumber(int(cp.ContainerPort)); err != nil {
			return &SpecError{fmt.Sprintf("containers[0].ports[%d].containerPort", i), err.Error()}
		}
		if cp.Name != "" && names[cp.Name] {
			return &SpecError{fmt.Sprintf("containers[0].ports[%d].name", i), fmt.Sprintf("port name %q is used twice (the API server would reject it)", cp.Name)}
		}
		names[cp.Name] = true
	}
	return nil
}

// checkRun checks what the lab's kubelet does with the one container of
// spec whatever it runs: its probes' kinds (an httpGet probe needs
// w.HTTPPort), its restartPolicy and its preStop hook, which it sets in w.
func checkRun(spec *corev1.PodSpec, w *Container) error {
	c := &spec.Containers[0]
	for _, pf := range probeFields(c) {
		if err := checkProbeKind(pf.field, pf.probe, w.HTTPPort); err != nil {
			return err
		}
	}
	switch spec.RestartPolicy {
	case "", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		return &SpecError{"restartPolicy", fmt.Sprintf("unknown restartPolicy %q (want Always, OnFailure or Never)", spec.RestartPolicy)}
	}
	var err error
	w.PreStop, err = preStopHook(c, spec.TerminationGracePeriodSeconds)
	return err
}

// LoadCommand is the pinlab image's subcommand of its load client (`pinlab
// load ...`, package loadpod): the first of a container's pinlab args.
const LoadCommand = "load"

// XDSCommand is the pinlab image's subcommand of its xDS control plane
// (`pinlab xds serve ...`, package xds; deploy/xds runs it).
const XDSCommand = "xds"

// Command returns the image's subcommand that spec's one container runs
// in place of a pod's servers: LoadCommand or XDSCommand, when the
// container is of image pinlab and, after any command that runs pinlab
// (ContainerArgs), its args start with one; "" otherwise (a pod's
// servers, For, or not a pinlab container).
func Command(spec *corev1.PodSpec) string {
	if len(spec.Containers) != 1 {
		return ""
	}
	args, err := ContainerArgs(&spec.Containers[0])
	if err != nil || len(args) == 0 {
		return ""
	}
	switch args[0] {
	case LoadCommand, XDSCommand:
		return args[0]
	}
	return ""
}

// IsLoad reports whether spec's one container runs the pinlab image's load
// client (Command is LoadCommand).
func IsLoad(spec *corev1.PodSpec) bool { return Command(spec) == LoadCommand }

// ForCommand is For for a pod of one of the image's other commands
// (Command: the load client, the xDS control plane): the same checks of
// the pod (one container, image pinlab, its containerPorts, the kinds of
// its probes, httpGet not among them, its preStop hook and restartPolicy)
// but for the args, which the command reads when it starts (it exits 2 on
// bad ones, as the image's process does). The Container has no Args and
// no ports: the command serves no calls of a pod's.
func ForCommand(spec *corev1.PodSpec) (Container, error) {
	cmd := Command(spec)
	if cmd == "" {
		return Container{}, &SpecError{"containers[0].args", fmt.Sprintf("not one of the pinlab image's commands: want one container of image pinlab with args [%s, ...] or [%s, serve, ...]", LoadCommand, XDSCommand)}
	}
	c := &spec.Containers[0]
	if err := checkPorts(c); err != nil {
		return Container{}, err
	}
	for _, pf := range probeFields(c) {
		if pf.probe != nil && pf.probe.HTTPGet != nil {
			return Container{}, &SpecError{pf.field + ".httpGet", noHTTPProbe[cmd]}
		}
	}
	var w Container
	if err := checkRun(spec, &w); err != nil {
		return Container{}, err
	}
	return w, nil
}

// noHTTPProbe says, per command, why an httpGet probe cannot pass.
var noHTTPProbe = map[string]string{
	LoadCommand: "the load client serves no HTTP a probe can read (its events need a token); probe its events port with tcpSocket",
	XDSCommand:  "the xDS control plane serves gRPC only; probe its port with grpc (it serves grpc.health.v1) or tcpSocket",
}

// metricsPort resolves the metrics port of a container with args a, as
// Container's MetricsPort describes it.
func metricsPort(c *corev1.Container, a Args) int {
	if a.MetricsPort != 0 {
		return a.MetricsPort
	}
	for _, cp := range c.Ports {
		if cp.Name == MetricsPortName && (cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP) {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// servingPorts resolves the gRPC and HTTP ports of a container with args
// a, as Container's Port and HTTPPort describe them.
func servingPorts(c *corev1.Container, a Args) (grpcPort, httpPort int) {
	tcp := func(cp corev1.ContainerPort) bool { return cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP }
	httpPort = a.HTTPPort
	if httpPort == 0 {
		for _, cp := range c.Ports {
			if cp.Name == HTTPPortName && tcp(cp) {
				httpPort = int(cp.ContainerPort)
				break
			}
		}
	}
	grpcPort = a.Port
	if grpcPort == 0 {
		grpcPort = DefaultPort
		for _, cp := range c.Ports {
			if tcp(cp) && int(cp.ContainerPort) != httpPort && cp.Name != MetricsPortName && int(cp.ContainerPort) != a.MetricsPort {
				grpcPort = int(cp.ContainerPort)
				break
			}
		}
	}
	return grpcPort, httpPort
}
