package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podlog"
	"github.com/pinlab/pinlab/internal/podnet"
)

// LoadClient runs one container of the pinlab image's load client on the
// node, as the image's process runs it, until ctx ends (its SIGTERM or
// SIGKILL), and returns its exit code: 2 on bad args, 1 when it could not
// start, 0 when stopped (see package loadpod, whose Main it calls on a
// loadpod.Host made of c). It is called on a goroutine of its own per
// container run; it must return soon after ctx ends.
type LoadClient func(ctx context.Context, c LoadContainer) int

// LoadContainer is what the node gives a container of the load client:
// its args and environment, and what a real pod's network and
// Kubernetes would give it (the fields of a loadpod.Host).
type LoadContainer struct {
	// Args are the container's pinlab args, the first "load"
	// (workload.ContainerArgs); Getenv reads its environment
	// (containerEnv).
	Args   []string
	Getenv func(string) string
	// Source is the pod IP, which the client dials from; EventsIP the
	// same, where it serves its events.
	Source, EventsIP netip.Addr
	// Dial, for a pod with its own network namespace (Config.PodNetwork),
	// opens the client's sockets (network "tcp" or "udp") inside it, from
	// the pod IP, to the lab's addresses only (package loopback), as a
	// process in the pod would: its connections and its DNS queries
	// leave from the pod's eth0 (loadpod.Host.Dial). Nil when the pod
	// shares the node's namespace, where the pod IP is local.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DNS is the cluster DNS ("IP:port", Kubelet.clusterDNS) for dns:///
	// targets; "" when the node has none.
	DNS string
	// Kubernetes is the kubelet's client, for the "kubernetes" resolver.
	Kubernetes kubernetes.Interface
	// Listen opens the events listener (package loopback's checks),
	// inside the pod's own network namespace when it has one, where the
	// kubelet API's port-forward reaches it at the pod IP.
	Listen func(ctx context.Context, addr string) (net.Listener, error)
	// SetMinResolutionInterval refuses --min-resolution-interval:
	// grpc-go's setting is process-wide, and the node runs every pod's
	// client in one process.
	SetMinResolutionInterval func(time.Duration) error
	// Stdout and Stderr are the container's log, line by line.
	Stdout, Stderr io.Writer
}

// loadProcess returns the process of pod p's load client container, on
// the pod IP, writing to out (see LoadContainer): in the pod's own network
// namespace when it has one (w.sandbox), else in the node's. It errs (the
// container cannot start) when the node runs no load clients (no
// Config.LoadClient) or when the env cannot be read.
func (w *podWorker) loadProcess(ctx context.Context, p *corev1.Pod, out *podlog.Log) (process, error) {
	run := w.k.cfg.LoadClient
	if run == nil {
		return nil, errors.New("this node runs no load clients (kubelet.Config.LoadClient)")
	}
	args, stdout, stderr, err := w.commandArgs(p, out)
	if err != nil {
		return nil, err
	}
	env, err := w.containerEnv(ctx, p)
	if err != nil {
		return nil, err
	}
	c := LoadContainer{
		Args: args, Getenv: func(k string) string { return env[k] },
		Source: w.ip, EventsIP: w.ip, DNS: w.k.clusterDNS(ctx), Kubernetes: w.k.client,
		Listen: loopback.Listen,
		SetMinResolutionInterval: func(time.Duration) error {
			return errors.New("grpc-go's least time between resolutions is process-wide, and the lab's node runs every pod's client in one process")
		},
		Stdout: stdout, Stderr: stderr,
	}
	if sb := w.sandbox; sb != nil {
		c.Dial, c.Listen = sandboxDial(sb), sandboxListen(sb)
	}
	return &commandProcess{run: func(ctx context.Context) int { return run(ctx, c) }, errs: stderr}, nil
}

// sandboxDial opens sockets as a process in sb's pod does: inside its
// network namespace, from its address, after package loopback's checks.
// Each socket is made on a thread inside the namespace (Sandbox.Do) and
// keeps it; once the sandbox is gone it fails (podnet.ErrGone).
func sandboxDial(sb *podnet.Sandbox) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := loopback.Dialer{Source: sb.IP}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := sb.Do(func() (err error) {
			c, err = d.Dial(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// sandboxListen opens listeners inside sb's network namespace, after
// package loopback's checks, as the pod's servers do.
func sandboxListen(sb *podnet.Sandbox) func(ctx context.Context, addr string) (net.Listener, error) {
	return func(ctx context.Context, addr string) (net.Listener, error) {
		var ln net.Listener
		err := sb.Do(func() (err error) {
			ln, err = loopback.Listen(ctx, addr)
			return err
		})
		return ln, err
	}
}

// containerEnv is the environment of p's container as a container runtime
// gives it: HOSTNAME the pod's name, then the container's env in order,
// each a value, a Secret's key (read through the API) or a field of the
// pod (the downward API's metadata.name, metadata.namespace, metadata.uid,
// spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP).
// $(VAR) references, envFrom and resource fields are not expanded.
func (w *podWorker) containerEnv(ctx context.Context, p *corev1.Pod) (map[string]string, error) {
	env := map[string]string{"HOSTNAME": p.Name}
	for _, e := range p.Spec.Containers[0].Env {
		v, err := w.envValue(ctx, p, e)
		if err != nil {
			return nil, err
		}
		env[e.Name] = v
	}
	return env, nil
}

// fieldValue is the downward API's value of field path of pod p, at ip.
func (w *podWorker) fieldValue(p *corev1.Pod, e corev1.EnvVar) (string, error) {
	switch path := e.ValueFrom.FieldRef.FieldPath; path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return w.k.cfg.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP":
		return w.ip.String(), nil
	case "status.hostIP":
		return w.k.cfg.NodeIP.String(), nil
	default:
		return "", fmt.Errorf("$%s: the lab's node gives no field %q", e.Name, path)
	}
}

// clusterDNS is the cluster DNS's "IP:port" for a load client's dns:///
// targets: what a pod reaches at Config.ClusterDNS, port 53, through its
// resolv.conf, found through the API as the lab publishes it. The Service
// at that ClusterIP (kube-dns) names the port; when one of its
// EndpointSlices lists a ready endpoint (the real CoreDNS, behind the
// kernel's kube-proxy, which serves a ClusterIP to pod sources only and
// grpc-go's resolver sends from none), that endpoint's address and port;
// else the ClusterIP with the Service's DNS port (pinlab's DNS binds the
// ClusterIP itself, on 53 or the port it could bind), else port 53. ""
// without a ClusterDNS.
func (k *Kubelet) clusterDNS(ctx context.Context) string {
	ip := k.cfg.ClusterDNS
	if !ip.IsValid() {
		return ""
	}
	port := int32(53)
	svcs, err := k.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.cfg.Logger.Warn("kubelet: the cluster DNS Service", "err", err)
		return netip.AddrPortFrom(ip, uint16(port)).String()
	}
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP != ip.String() {
			continue
		}
		if ep := k.dnsEndpoint(ctx, &s); ep.IsValid() {
			return ep.String()
		}
		for _, sp := range s.Spec.Ports {
			if sp.Protocol == corev1.ProtocolUDP || sp.Protocol == "" {
				port = sp.Port
				break
			}
		}
		break
	}
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// dnsEndpoint is the first ready endpoint of Service s's EndpointSlices,
// with its UDP port; invalid when there is none.
func (k *Kubelet) dnsEndpoint(ctx context.Context, s *corev1.Service) netip.AddrPort {
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.Name}
	list, err := k.client.DiscoveryV1().EndpointSlices(s.Namespace).List(ctx, sel)
	if err != nil {
		return netip.AddrPort{}
	}
	for _, es := range list.Items {
		var port int32
		for _, p := range es.Ports {
			if p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolUDP) {
				port = *p.Port
				break
			}
		}
		for _, ep := range es.Endpoints {
			if port == 0 || len(ep.Addresses) == 0 || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			if a, err := netip.ParseAddr(ep.Addresses[0]); err == nil {
				return netip.AddrPortFrom(a, uint16(port))
			}
		}
	}
	return netip.AddrPort{}
}

// tailWriter writes whole lines to a container's output, and keeps the
// last one for its exit message.
type tailWriter struct {
	out *podlog.Log

	mu      sync.Mutex
	partial []byte
	tail    string
}

func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, b...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		t.tail = string(t.partial[:i])
		t.out.Printf("%s", t.tail)
		t.partial = t.partial[i+1:]
	}
}

// last is the last line written.
func (t *tailWriter) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tail
}
