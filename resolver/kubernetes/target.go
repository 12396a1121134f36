package kubernetes

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/resolver"
	"k8s.io/apimachinery/pkg/util/validation"
)

// namespaceFile holds the pod's own namespace in a cluster (the service
// account volume every pod gets). A variable so tests can point it
// elsewhere.
var namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// target is a parsed kubernetes:// target: a Service and which of its ports
// to dial.
type target struct {
	namespace, service string
	// port is the port as written: a name, a number, or "" for each
	// slice's first port.
	port string
	// number is port as a number; 0 when port is a name or "".
	number int
}

// String is the canonical form, kubernetes://namespace/service[:port], used
// in messages and as the metrics' target label.
func (t target) String() string {
	s := "kubernetes://" + t.namespace + "/" + t.service
	if t.port != "" {
		s += ":" + t.port
	}
	return s
}

// key is the Service as namespace/name.
func (t target) key() string { return t.namespace + "/" + t.service }

// parseTarget reads the target forms sercand/kuberesolver accepts:
//
//	kubernetes:///service[.namespace[.svc.<zone>]][:port]
//	kubernetes://namespace/service[:port]
//	kubernetes://service[.namespace[.svc.<zone>]][:port][/]
//
// The port is a Service port name or a number. Without a namespace the
// target takes defaultNS.
func parseTarget(t resolver.Target, defaultNS string) (target, error) {
	host, endpoint := t.URL.Host, t.Endpoint()
	var name, ns, port string
	switch {
	case host == "": // kubernetes:///service.namespace:port
		name, ns, port = splitName(endpoint)
	case endpoint != "" && t.URL.Port() == "": // kubernetes://namespace/service:port
		name, _, port = splitName(endpoint) // a namespace after the name is ignored, as kuberesolver
		ns = host
	default: // kubernetes://service.namespace:port
		name, ns, port = splitName(host)
	}
	if ns == "" {
		ns = defaultNS
	}
	out := target{namespace: ns, service: name, port: port}
	if err := out.check(); err != nil {
		return target{}, fmt.Errorf("kubernetes resolver: target %q: %w", t.URL.String(), err)
	}
	if n, err := strconv.Atoi(port); err == nil {
		out.number = n
	}
	return out, nil
}

// splitName splits "service[.namespace[.svc.zone]][:port]"; anything after
// the namespace (svc and the cluster zone) is ignored, as kuberesolver does.
func splitName(s string) (name, ns, port string) {
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		s, port = s[:i], s[i+1:]
	}
	parts := strings.SplitN(s, ".", 3)
	name = parts[0]
	if len(parts) > 1 {
		ns = parts[1]
	}
	return name, ns, port
}

// check validates the names as the API server would: a Service name is a
// DNS-1035 label, a namespace a DNS-1123 label, a port a number from 1 to
// 65535 or an IANA service name (a Service port's name).
func (t target) check() error {
	if t.service == "" {
		return errors.New("no Service name")
	}
	if errs := validation.IsDNS1035Label(t.service); len(errs) > 0 {
		return fmt.Errorf("Service name %q: %s", t.service, errs[0])
	}
	if errs := validation.IsDNS1123Label(t.namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", t.namespace, errs[0])
	}
	if t.port == "" {
		return nil
	}
	if n, err := strconv.Atoi(t.port); err == nil {
		if errs := validation.IsValidPortNum(n); len(errs) > 0 {
			return fmt.Errorf("port %d: %s", n, errs[0])
		}
		return nil
	}
	if errs := validation.IsValidPortName(t.port); len(errs) > 0 {
		return fmt.Errorf("port name %q: %s", t.port, errs[0])
	}
	return nil
}

// podNamespace is the namespace of the pod this process runs in, read from
// its service account volume; "default" outside a pod, as kuberesolver.
func podNamespace() string {
	b, err := os.ReadFile(namespaceFile)
	if ns := strings.TrimSpace(string(b)); err == nil && ns != "" {
		return ns
	}
	return "default"
}
