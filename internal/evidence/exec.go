package evidence

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/pinlab/pinlab/internal/agent"
)

// ExecCommand is what Exec runs in a server container: the kernel's TCP
// tables of the pod's network namespace, which every container of the pod
// shares.
var ExecCommand = []string{"cat", "/proc/net/tcp", "/proc/net/tcp6"}

// Bounds of Exec.
const (
	// ExecParallel is how many pods Collect reads through exec at once.
	ExecParallel = 16
	// execOutput bounds one reading's output (a pod with 20 000 sockets
	// prints about 3 MB of tcp6).
	execOutput = 16 << 20
)

// UnitConnMs is the Evidence Unit of Exec's readings: each connection's
// figure is the milliseconds it was seen open, so that a pod's figure
// over the window, per second, is the mean number of client connections
// it held.
const UnitConnMs = "connection-ms"

// Exec is a Sampler that reads each pod's TCP connections by running
// ExecCommand in its server container through the API server's pods/exec,
// as kubectl exec does (WebSocket, falling back to SPDY), once per
// Sample. It is diagnose's fallback for pods that serve no channelz and
// have no pinlab-agent: it changes nothing in the pod, but needs a cat in
// the container (distroless and scratch images have none) and gives no
// byte counts, only which connections are open. A Sample's Socket.Streams
// is the milliseconds since Exec first saw that socket (its inode), and
// Calls.Started their sum (Unit UnitConnMs). The byte order of the tables
// is the one under which some local address is the pod's IP
// (little-endian unless only big-endian gives it). Safe for concurrent use.
type Exec struct {
	// Config reaches the API server (Kube.Config); required.
	Config *rest.Config
	// Pod returns the namespace and name of the pod whose IP is ip
	// (Kube.PodByIP); required.
	Pod func(ip netip.Addr) (namespace, name string, ok bool)

	mu     sync.Mutex
	client kubernetes.Interface
	pods   map[string]*execPod // by namespace/name
}

// execPod is what Exec keeps of one pod: the container it reads and when
// it first saw each socket.
type execPod struct {
	container string
	first     map[uint64]time.Time
}

// Unit reports Exec's unit, UnitConnMs.
func (e *Exec) Unit() string { return UnitConnMs }

// Parallel is how many pods Collect samples at once through Exec.
func (e *Exec) Parallel() int { return ExecParallel }

func (e *Exec) init() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client != nil {
		return nil
	}
	if e.Config == nil || e.Pod == nil {
		return errors.New("exec: Config and Pod are required")
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.QPS, cfg.Burst = 100, 300 // as Agents: a round is one request a pod
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	e.client, e.pods = cs, map[string]*execPod{}
	return nil
}

// Sample runs ExecCommand in the pod at addr's IP and returns its
// established connections on addr's port whose local address is the
// pod's IP or a loopback one (an inbound sidecar's).
func (e *Exec) Sample(ctx context.Context, addr netip.AddrPort) (Sample, error) {
	if err := e.init(); err != nil {
		return Sample{}, err
	}
	ns, name, ok := e.Pod(addr.Addr())
	if !ok {
		return Sample{}, fmt.Errorf("exec: no pod has the IP %s", addr.Addr())
	}
	p, err := e.pod(ctx, ns, name, addr.Port())
	if err != nil {
		return Sample{}, err
	}
	out, err := e.run(ctx, ns, name, p.container)
	if err != nil {
		return Sample{}, err
	}
	at := time.Now()
	socks, err := parseTables(out, addr.Addr())
	if err != nil {
		return Sample{}, fmt.Errorf("reading %s in its %s container: %w", strings.Join(ExecCommand[1:], " and "), p.container, err)
	}
	s := Sample{At: at, Sockets: map[int64]Socket{}}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, so := range socks {
		local := so.Local.Addr().Unmap()
		if so.State != tcpEstablished || so.Inode == 0 || so.Local.Port() != addr.Port() {
			continue // not a connection the server has accepted
		}
		if local != addr.Addr() && !local.IsLoopback() {
			continue // another pod's, where pods share a network namespace (the lab's)
		}
		first, seen := p.first[so.Inode]
		if !seen {
			first = at
			p.first[so.Inode] = at
		}
		ms := at.Sub(first).Milliseconds()
		remote := netip.AddrPortFrom(so.Remote.Addr().Unmap(), so.Remote.Port())
		s.Sockets[int64(so.Inode)] = Socket{Remote: remote.String(), Streams: ms}
		s.Calls.Started += ms
	}
	return s, nil
}

// tcpEstablished is TCP_ESTABLISHED in include/net/tcp_states.h.
const tcpEstablished = 1

// pod returns what Exec keeps of pod ns/name, choosing its container at
// the first call: the one that declares port, else the one named by the
// annotation kubectl.kubernetes.io/default-container, else the first.
func (e *Exec) pod(ctx context.Context, ns, name string, port uint16) (*execPod, error) {
	key := ns + "/" + name
	e.mu.Lock()
	p := e.pods[key]
	e.mu.Unlock()
	if p != nil {
		return p, nil
	}
	obj, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("exec: %w", apiError(err, "get pods"))
	}
	p = &execPod{container: serverContainer(obj, port), first: map[uint64]time.Time{}}
	e.mu.Lock()
	defer e.mu.Unlock()
	if q := e.pods[key]; q != nil {
		return q, nil
	}
	e.pods[key] = p
	return p, nil
}

// serverContainer names the container of p that serves port (see pod).
func serverContainer(p *corev1.Pod, port uint16) string {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.ContainerPort == int32(port) {
				return c.Name
			}
		}
	}
	if c := p.Annotations["kubectl.kubernetes.io/default-container"]; c != "" {
		return c
	}
	if len(p.Spec.Containers) > 0 {
		return p.Spec.Containers[0].Name
	}
	return ""
}

// run runs ExecCommand in the container and returns its output. A
// command that printed a table and then failed (a kernel without IPv6 has
// no tcp6) still gives its output.
func (e *Exec) run(ctx context.Context, ns, name, container string) ([]byte, error) {
	req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: ExecCommand, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := executor(e.Config, req.URL())
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	stdout, stderr := &capped{max: execOutput}, &capped{max: 4 << 10}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
	var code utilexec.CodeExitError
	switch {
	case err == nil:
	case errors.As(err, &code) && bytes.Contains(stdout.Bytes(), []byte("local_address")):
	case errors.As(err, &code):
		return nil, fmt.Errorf("`%s` in its %s container exited with code %d: %s", strings.Join(ExecCommand, " "), container, code.Code, strings.TrimSpace(stderr.String()))
	case strings.Contains(err.Error(), `cannot create resource "pods/exec"`):
		// client-go's executors give the API server's refusal as text.
		return nil, fmt.Errorf("exec in its %s container: the API server forbids it (RBAC: create pods/exec): %w", container, err)
	default:
		return nil, fmt.Errorf("exec in its %s container: %w", container, apiError(err, "create pods/exec"))
	}
	if stdout.over {
		return nil, fmt.Errorf("`%s` in its %s container printed more than %d MiB", strings.Join(ExecCommand, " "), container, execOutput>>20)
	}
	return stdout.Bytes(), nil
}

// executor is kubectl exec's: the WebSocket protocol, falling back to
// SPDY when the API server or a proxy refuses the upgrade.
func executor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// parseTables parses the command's output in the byte order under which
// some socket's local address is ip: little-endian, else big-endian.
func parseTables(out []byte, ip netip.Addr) ([]agent.ProcSocket, error) {
	var first []agent.ProcSocket
	for i, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		socks, err := agent.ParseProcNetTables(bytes.NewReader(out), order)
		if err != nil {
			return nil, err
		}
		for _, s := range socks {
			if s.Local.Addr().Unmap() == ip {
				return socks, nil
			}
		}
		if i == 0 {
			first = socks
		}
	}
	return first, nil
}

// capped is a buffer that keeps at most max bytes and notes that more came.
type capped struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.over = true
		c.Buffer.Write(p[:max(0, room)])
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
