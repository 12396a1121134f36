package workload

import (
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

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

// CheckProbePort reports the first probe of c (readiness, liveness, then
// startup) that can never succeed: a grpc probe at a port other than
// listen (the gRPC server's, Container.Port), a tcpSocket probe at neither
// listen nor the pod's HTTP port, an httpGet probe at a port other than
// the HTTP port (see Container.HTTPPort) or at a path the pod's HTTP server
// does not answer with 200 (only /healthz and /v1/price?sku=X do). The
// kubelet runs such a pod, but a readiness or startup probe there never
// succeeds, and a liveness probe there restarts the container forever.
// Probes of a kind the lab cannot run are left to For. Errors are
// *SpecError.
func CheckProbePort(c *corev1.Container, listen int) error {
	httpPort := 0
	if args, err := ContainerArgs(c); err == nil {
		if a, err := ParseArgs(args); err == nil {
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
		return nil // For reports it
	}
	n, err := ResolvePort(c, port)
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

// ResolvePort turns a probe's port, a number or the name of one of c's
// containerPorts, into a TCP port number (1-65535), as the kubelet's
// prober does. Errors: a name c does not declare, a number out of range.
func ResolvePort(c *corev1.Container, port intstr.IntOrString) (int, error) {
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
