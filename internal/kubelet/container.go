package kubelet

import (
	"fmt"
	"net/netip"
	"net/url"
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

// HTTPPortName is the name of the containerPort that gives a pod its
// HTTP/1.1 and WebSocket server when its args have no --http-port.
const HTTPPortName = "http"

// MetricsPortName is the name of the containerPort that gives a pod its
// Prometheus metrics server when its args have no --metrics-port.
const MetricsPortName = "metrics"

// Workload is what the kubelet runs for a pod spec.
type Workload struct {
	Args pod.Args
	// Port is where the gRPC server listens: --port, else the container's
	// first TCP containerPort other than HTTPPort and MetricsPort, else
	// pod.DefaultPort.
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

// WorkloadFor checks that spec is a pod the lab's kubelet can run (exactly
// one container, image pinlab, valid pod args, distinct gRPC and HTTP
// ports, readiness, liveness and startup probes of kind grpc, tcpSocket or,
// for a pod with an HTTP port, httpGet (scheme HTTP, no host), a preStop
// hook the lab can run (see Hook), no postStart hook, a known
// restartPolicy) and returns its workload. Errors are *SpecError.
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
	names := map[string]bool{}
	for i, cp := range c.Ports {
		if _, err := portNumber(int(cp.ContainerPort)); err != nil {
			return Workload{}, &SpecError{fmt.Sprintf("containers[0].ports[%d].containerPort", i), err.Error()}
		}
		if cp.Name != "" && names[cp.Name] {
			return Workload{}, &SpecError{fmt.Sprintf("containers[0].ports[%d].name", i), fmt.Sprintf("port name %q is used twice (the API server would reject it)", cp.Name)}
		}
		names[cp.Name] = true
	}
	w := Workload{Args: a}
	w.Port, w.HTTPPort = servingPorts(c, a)
	w.MetricsPort = metricsPort(c, a)
	if w.HTTPPort != 0 && w.HTTPPort == w.Port {
		return Workload{}, &SpecError{"containers[0].args", fmt.Sprintf("container %q: the HTTP port %d is also the gRPC port; give --port or --http-port another one", c.Name, w.Port)}
	}
	if w.MetricsPort != 0 && (w.MetricsPort == w.Port || w.MetricsPort == w.HTTPPort) {
		return Workload{}, &SpecError{"containers[0].args", fmt.Sprintf("container %q: the metrics port %d is also the gRPC or HTTP port; give --metrics-port or the %q containerPort another one", c.Name, w.MetricsPort, MetricsPortName)}
	}
	for _, pf := range probeFields(c) {
		if err := checkProbeKind(pf.field, pf.probe, w.HTTPPort); err != nil {
			return Workload{}, err
		}
	}
	switch spec.RestartPolicy {
	case "", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		return Workload{}, &SpecError{"restartPolicy", fmt.Sprintf("unknown restartPolicy %q (want Always, OnFailure or Never)", spec.RestartPolicy)}
	}
	if w.PreStop, err = preStopHook(c, spec.TerminationGracePeriodSeconds); err != nil {
		return Workload{}, err
	}
	return w, nil
}

// metricsPort resolves the metrics port of a container with args a, as
// Workload's MetricsPort describes it.
func metricsPort(c *corev1.Container, a pod.Args) int {
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
// a, as Workload's Port and HTTPPort describe them.
func servingPorts(c *corev1.Container, a pod.Args) (grpcPort, httpPort int) {
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
		grpcPort = pod.DefaultPort
		for _, cp := range c.Ports {
			if tcp(cp) && int(cp.ContainerPort) != httpPort && cp.Name != MetricsPortName && int(cp.ContainerPort) != a.MetricsPort {
				grpcPort = int(cp.ContainerPort)
				break
			}
		}
	}
	return grpcPort, httpPort
}

// checkProbeKind reports a probe the lab cannot run: anything but grpc,
// tcpSocket and httpGet, and an httpGet probe of a pod without an HTTP
// port, with scheme HTTPS (the pod's server speaks plain HTTP) or with a
// host (the lab probes only the pod IP).
func checkProbeKind(field string, p *corev1.Probe, httpPort int) error {
	switch {
	case p == nil, p.GRPC != nil, p.TCPSocket != nil:
		return nil
	case p.HTTPGet == nil:
		return &SpecError{field, "only grpc and tcpSocket probes are supported in the lab, and httpGet probes for a pod with an HTTP port"}
	}
	g := p.HTTPGet
	switch {
	case httpPort == 0:
		return &SpecError{field + ".httpGet", fmt.Sprintf("the pod has no HTTP server to probe; give it --http-port N or a containerPort named %q", HTTPPortName)}
	case g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP:
		return &SpecError{field + ".httpGet.scheme", fmt.Sprintf("scheme %q is not supported in the lab: the pod's server speaks plain HTTP", g.Scheme)}
	case g.Host != "":
		return &SpecError{field + ".httpGet.host", "host is not supported in the lab: probes go to the pod IP"}
	}
	return nil
}

// CheckProbePort reports a probe that can never succeed: a grpc probe at a
// port other than listen (the gRPC server's), a tcpSocket probe at neither
// listen nor the pod's HTTP port, an httpGet probe at a port other than
// the HTTP port (see Workload.HTTPPort) or at a path the pod's HTTP server
// does not answer with 200 (only /healthz and /v1/price?sku=X do). The
// kubelet runs such a pod, but a readiness or startup probe there never
// succeeds, and a liveness probe there restarts the container forever.
// Errors are *SpecError.
func CheckProbePort(c *corev1.Container, listen int) error {
	httpPort := 0
	if args, err := ContainerArgs(c); err == nil {
		if a, err := pod.ParseArgs(args); err == nil {
			_, httpPort = servingPorts(c, a)
		}
	}
	for _, pf := range probeFields(c) {
		if p := pf.probe; p != nil {
			if err := checkProbeTarget(c, pf.field, p, listen, httpPort); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkProbeTarget is CheckProbePort for one probe.
func checkProbeTarget(c *corev1.Container, field string, p *corev1.Probe, grpcPort, httpPort int) error {
	var port intstr.IntOrString
	var ok func(int) bool
	server := fmt.Sprintf("the server listens on %d", grpcPort)
	switch {
	case p.GRPC != nil:
		field, port = field+".grpc.port", intstr.FromInt32(p.GRPC.Port)
		ok = func(n int) bool { return n == grpcPort }
	case p.TCPSocket != nil:
		field, port = field+".tcpSocket.port", p.TCPSocket.Port
		ok = func(n int) bool { return n == grpcPort || (httpPort != 0 && n == httpPort) }
		if httpPort != 0 {
			server = fmt.Sprintf("the servers listen on %d (gRPC) and %d (HTTP)", grpcPort, httpPort)
		}
	case p.HTTPGet != nil:
		if err := checkProbePath(p.HTTPGet.Path); err != nil {
			return &SpecError{field + ".httpGet.path", err.Error()}
		}
		field, port = field+".httpGet.port", p.HTTPGet.Port
		ok = func(n int) bool { return httpPort != 0 && n == httpPort }
		server = fmt.Sprintf("the HTTP server listens on %d", httpPort)
		if httpPort == 0 {
			server = "the pod has no HTTP server"
		}
	default:
		return nil // WorkloadFor reports it
	}
	n, err := resolvePort(c, port)
	if err != nil {
		return &SpecError{field, err.Error()}
	}
	if !ok(n) {
		return &SpecError{field, fmt.Sprintf("probes port %d, but %s, so the probe would never succeed", n, server)}
	}
	return nil
}

// checkProbePath reports an httpGet probe path the pod's HTTP server does
// not answer with a success: it serves /healthz, and /v1/price with a sku
// query parameter (see package webapi).
func checkProbePath(path string) error {
	u, err := url.Parse(path)
	if err == nil {
		switch {
		case u.Path == "/healthz":
			return nil
		case u.Path == "/v1/price" && u.Query().Get("sku") != "":
			return nil
		}
	}
	return fmt.Errorf("path %q: the pod's HTTP server answers probes on /healthz (or /v1/price?sku=X); other paths fail, so the probe would never succeed", path)
}

// resolvePort turns a probe's port (number or container port name) into a
// TCP port number.
func resolvePort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return portNumber(int(port.IntVal))
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return portNumber(int(cp.ContainerPort))
		}
	}
	return 0, fmt.Errorf("probe: no container port named %q", port.StrVal)
}

// portNumber returns n if it is a TCP port (1-65535). The API's ports are
// int32 and the kubelet listens and dials on 16 bits: without this check
// 70000 would become 4464.
func portNumber(n int) (int, error) {
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %d is not a TCP port (1-65535)", n)
	}
	return n, nil
}

// containerConfig turns a pod into its process's config at ip.
func containerConfig(p *corev1.Pod, ip netip.Addr) (processConfig, error) {
	w, err := WorkloadFor(&p.Spec)
	if err != nil {
		return processConfig{}, err
	}
	pc := processConfig{grpc: pod.Config{
		Name:                  p.Name,
		Namespace:             p.Namespace,
		Addr:                  netip.AddrPortFrom(ip, uint16(w.Port)),
		MaxConnectionAge:      w.Args.MaxConnectionAge,
		MaxConnectionAgeGrace: w.Args.MaxConnectionAgeGrace,
		StartupDelay:          w.Args.StartupDelay,
		DrainDelay:            w.Args.DrainDelay,
		ServiceTime:           w.Args.ServiceTime,
	}}
	if w.MetricsPort != 0 {
		pc.grpc.MetricsAddr = netip.AddrPortFrom(ip, uint16(w.MetricsPort))
	}
	if w.HTTPPort != 0 {
		pc.web = &pod.WebConfig{Name: p.Name, Namespace: p.Namespace, Addr: netip.AddrPortFrom(ip, uint16(w.HTTPPort)), ServiceTime: w.Args.ServiceTime}
	}
	return pc, nil
}
