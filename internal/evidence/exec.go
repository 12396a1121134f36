package evidence

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
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
	// ExecParallel is how many pods Collect reads through exec at once:
	// each reading is one exec session through the API server and the
	// kubelet (on the lab's real control plane, 300 pods read in 17-19 s
	// with 32, 20-25 s with 16, for a 5 s window).
	ExecParallel = 32
	// execOutput bounds one reading's output: about 27 000 sockets of
	// tcp6 (150 bytes a row), ExecParallel of them held at once.
	execOutput = 4 << 20
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
// is the one under which some local address is one of the pod's IPs or a
// loopback address (little-endian unless only big-endian gives one).
// Errors begin "exec: ". Safe for concurrent use.
type Exec struct {
	// Config reaches the API server (Kube.Config); required.
	Config *rest.Config
	// Pod returns the namespace and name of the pod whose IP is ip
	// (Kube.PodByIP); required.
	Pod func(ip netip.Addr) (namespace, name string, ok bool)
	// Now, if not nil, is the clock a reading is taken by (tests);
	// nil is time.Now.
	Now func() time.Time

	mu     sync.Mutex
	client kubernetes.Interface
	pods   map[string]*execPod // by namespace/name
}

// execPod is what Exec keeps of one pod: the container it reads, its
// executor (kept, so that its transports are too), the pod's IPs, and
// when Exec first saw each socket.
type execPod struct {
	container string
	ex        remotecommand.Executor
	ips       []netip.Addr
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
	cs, err := podClient(e.Config)
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
	s, err := e.sample(ctx, addr)
	if err != nil {
		return Sample{}, fmt.Errorf("exec: %w", err)
	}
	return s, nil
}

func (e *Exec) sample(ctx context.Context, addr netip.AddrPort) (Sample, error) {
	if err := e.init(); err != nil {
		return Sample{}, err
	}
	ns, name, ok := e.Pod(addr.Addr())
	if !ok {
		return Sample{}, fmt.Errorf("no pod has the IP %s", addr.Addr())
	}
	p, err := e.pod(ctx, ns, name, addr.Port())
	if err != nil {
		return Sample{}, err
	}
	out, err := e.run(ctx, p)
	if err != nil {
		return Sample{}, err
	}
	at := time.Now()
	if e.Now != nil {
		at = e.Now()
	}
	socks, err := parseTables(out, p.ips)
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
		if !slices.Contains(p.ips, local) && (!local.IsLoopback() || addr.Addr().IsLoopback()) {
			// Another pod's, where pods share a network namespace (the
			// lab's); a loopback local address is an inbound sidecar's
			// only where the pod's own is not loopback.
			continue
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
		return nil, apiError(err, "get pods")
	}
	p = &execPod{container: serverContainer(obj, port), first: map[uint64]time.Time{}}
	for _, ip := range obj.Status.PodIPs { // both families of a dual-stack pod
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			p.ips = append(p.ips, a)
		}
	}
	if a, err := netip.ParseAddr(obj.Status.PodIP); err == nil && !slices.Contains(p.ips, a) {
		p.ips = append(p.ips, a)
	}
	req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: p.container, Command: ExecCommand, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	if p.ex, err = executor(e.Config, req.URL()); err != nil {
		return nil, err
	}
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
func (e *Exec) run(ctx context.Context, p *execPod) ([]byte, error) {
	container := p.container
	stdout, stderr := &capped{max: execOutput}, &capped{max: 4 << 10}
	err := p.ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
	var code utilexec.CodeExitError
	switch {
	case err == nil:
	case errors.As(err, &code) && bytes.Contains(stdout.Bytes(), []byte("local_address")):
	case errors.As(err, &code):
		return nil, fmt.Errorf("`%s` in its %s container exited with code %d: %s", strings.Join(ExecCommand, " "), container, code.Code, cmp.Or(strings.TrimSpace(stderr.String()), err.Error()))
	case strings.Contains(err.Error(), `cannot create resource "pods/exec"`):
		// client-go's executors give the API server's refusal as text.
		return nil, fmt.Errorf("in its %s container: the API server forbids it (RBAC: create pods/exec): %w", container, err)
	default:
		return nil, fmt.Errorf("in its %s container: %w", container, apiError(err, "create pods/exec"))
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
// some socket's local address is one of ips or a loopback address:
// little-endian, else big-endian.
func parseTables(out []byte, ips []netip.Addr) ([]agent.ProcSocket, error) {
	var first []agent.ProcSocket
	for i, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		socks, err := agent.ParseProcNetTables(bytes.NewReader(out), order)
		if err != nil {
			return nil, err
		}
		for _, s := range socks {
			if a := s.Local.Addr().Unmap(); slices.Contains(ips, a) || a.IsLoopback() {
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
