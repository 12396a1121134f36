package scenario

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// target checks a client target and resolves the Service it names; ns
// completes short names the way a pod's DNS search path does. An
// xds:///SERVICE.NAMESPACE:PORT target names a Service port, as the xDS
// control plane does (package xds), whatever the Service's kind.
func (objs objects) target(target, ns string) (plan.Target, error) {
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	xdsRest, isXDS := strings.CutPrefix(target, "xds:///")
	if !isXDS && strings.HasPrefix(target, "xds:") {
		return plan.Target{}, fmt.Errorf("%q: expected xds:///<service>.<namespace>:<port> (no authority), the name the xDS control plane serves", target)
	}
	if isXDS {
		target = xdsRest
	}
	host, port, err := splitTarget(target)
	if err != nil && isXDS {
		return plan.Target{}, fmt.Errorf("xds:///%s: expected xds:///<service>.<namespace>:<port>, the name the xDS control plane serves", target)
	}
	if err != nil {
		return plan.Target{}, err
	}
	labels := strings.Split(strings.TrimSuffix(strings.TrimSuffix(host, "."+Zone), ".svc"), ".")
	switch len(labels) {
	case 1:
	case 2:
		ns = labels[1]
	default:
		return plan.Target{}, fmt.Errorf("%q: host %q is not a Service name of zone %s", target, host, Zone)
	}
	svc := objs.service(ns, labels[0])
	if svc == nil {
		return plan.Target{}, fmt.Errorf("%q: no Service %q in namespace %q in this file", target, labels[0], ns)
	}
	t := plan.Target{Namespace: ns, Service: svc.Name, Host: fmt.Sprintf("%s.%s.svc.%s", svc.Name, ns, Zone), Port: port,
		Headless: svc.Spec.ClusterIP == corev1.ClusterIPNone, Selector: svc.Spec.Selector,
		ClientIPAffinity: svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP, XDS: isXDS}
	if isXDS {
		if len(labels) != 2 || strings.HasSuffix(host, ".svc") || strings.HasSuffix(host, "."+Zone) {
			return plan.Target{}, fmt.Errorf("xds:///%s: expected xds:///<service>.<namespace>:<port>, the name the xDS control plane serves", target)
		}
		if err := xdsPort(svc, port); err != nil {
			return plan.Target{}, fmt.Errorf("xds:///%s: %w", target, err)
		}
		t.PortName = servicePortName(svc, port)
		return t, nil
	}
	if err := objs.checkClientPort(t, svc); err != nil {
		return plan.Target{}, fmt.Errorf("%q: %w", target, err)
	}
	t.PortName = servicePortName(svc, port)
	t.MaxConnectionAge = objs.maxConnectionAge(ns, svc)
	return t, nil
}

// xdsPort checks that port is one of svc's ports (the xDS name's port).
func xdsPort(svc *corev1.Service, port int) error {
	var ports []string
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) == port {
			return nil
		}
		ports = append(ports, fmt.Sprint(sp.Port))
	}
	return fmt.Errorf("the Service %s has no port %d (ports: %s); an xDS name has the Service's port, not the pods'", svc.Name, port, strings.Join(ports, ", "))
}

// splitTarget reads "[dns:///]host:port" into a lowercase host without a
// trailing dot and a port.
func splitTarget(target string) (string, int, error) {
	rest := target
	if r, ok := strings.CutPrefix(target, "dns:"); ok {
		if !strings.HasPrefix(r, "///") {
			return "", 0, fmt.Errorf("%q: lab clients resolve through the lab's cluster DNS; write dns:///<name>:<port> without an authority", target)
		}
		rest = strings.TrimPrefix(r, "///")
	} else if strings.Contains(target, "://") || strings.HasPrefix(target, "passthrough:") || strings.HasPrefix(target, "ipv4:") {
		return "", 0, fmt.Errorf("%q: expected <service>.<namespace>.svc.%s:<port>, optionally after dns:///", target, Zone)
	}
	host, portStr, err := net.SplitHostPort(rest)
	if err != nil {
		return "", 0, fmt.Errorf("%q: expected <service>[.<namespace>[.svc.%s]]:<port>", target, Zone)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port %q is not a number from 1 to 65535", target, portStr)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip := net.ParseIP(host); ip != nil {
		return "", 0, fmt.Errorf("%q: %s is an IP address; a client targets a Service by name, <service>[.<namespace>[.svc.%s]]:<port>, which the lab's DNS resolves", target, host, Zone)
	}
	return host, port, nil
}

// checkClientPort checks that a client's port reaches the Service: a
// ClusterIP client dials a Service port; a headless client dials pod IPs,
// so it needs the pods' port. Selector-less headless Services are not
// checked: their slices may list any ports.
func (objs objects) checkClientPort(t plan.Target, s *corev1.Service) error {
	if t.Headless && len(s.Spec.Selector) == 0 {
		return nil
	}
	var ports []string
	for _, sp := range s.Spec.Ports {
		want := int(sp.Port)
		if t.Headless {
			for _, w := range objs.backends(t.Namespace, s) {
				if p, err := podPort(w, sp); err == nil {
					want = p
				}
			}
		}
		if want == t.Port {
			return nil
		}
		ports = append(ports, fmt.Sprint(want))
	}
	if t.Headless {
		return fmt.Errorf("the Service %s is headless: clients dial the pods' IPs directly, so the port must be the pods' port (%s), not %d",
			s.Name, strings.Join(ports, " or "), t.Port)
	}
	return fmt.Errorf("the Service %s has no port %d (ports: %s)", s.Name, t.Port, strings.Join(ports, ", "))
}

// servicePortName names the Service port a client dials: the one whose
// port (ClusterIP) or target (headless, the pods' port) is port; else the
// first.
func servicePortName(s *corev1.Service, port int) string {
	for _, sp := range s.Spec.Ports {
		if int(sp.Port) == port || sp.TargetPort.IntValue() == port {
			return sp.Name
		}
	}
	if len(s.Spec.Ports) > 0 {
		return s.Spec.Ports[0].Name
	}
	return ""
}

// maxConnectionAge returns the MaxConnectionAge the pods behind s are
// configured with (the first found); 0 for none.
func (objs objects) maxConnectionAge(ns string, s *corev1.Service) time.Duration {
	for _, w := range objs.backends(ns, s) {
		for _, c := range w.Template.Spec.Containers {
			if args, err := workload.ContainerArgs(&c); err == nil {
				if a, err := workload.ParseArgs(args); err == nil && a.MaxConnectionAge > 0 {
					return a.MaxConnectionAge
				}
			}
		}
	}
	return 0
}

// checkProtocolPort reports a client whose target port leads to the pods'
// server of another protocol: gRPC at the HTTP port, HTTP or WebSocket at
// the gRPC port.
func (objs objects) checkProtocolPort(t plan.Target, protocol string) error {
	web := protocol == plan.ProtocolHTTP || protocol == plan.ProtocolWebSocket
	s := objs.service(t.Namespace, t.Service)
	for _, w := range objs.backends(t.Namespace, s) {
		wl, err := workload.For(&w.Template.Spec)
		if err != nil {
			continue // reported on the workload
		}
		port := t.Port
		if !t.Headless {
			for _, sp := range s.Spec.Ports {
				if int(sp.Port) == t.Port {
					if pp, err := podPort(w, sp); err == nil {
						port = pp
					}
				}
			}
		}
		switch {
		case !web && wl.HTTPPort != 0 && port == wl.HTTPPort:
			return fmt.Errorf("port %d leads to the HTTP/1.1 server of the pods of %s %s; a gRPC client needs their gRPC port %d (or set protocol: http or websocket)", t.Port, w.Kind, w.Name, wl.Port)
		case web && port == wl.Port:
			if wl.HTTPPort == 0 {
				return fmt.Errorf("the pods of %s %s serve no HTTP: give them --http-port or a container port named http", w.Kind, w.Name)
			}
			return fmt.Errorf("port %d leads to the gRPC server of the pods of %s %s; a %s client needs their HTTP port %d", t.Port, w.Kind, w.Name, protocol, wl.HTTPPort)
		}
	}
	return nil
}
