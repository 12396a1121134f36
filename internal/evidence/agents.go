package evidence

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/pinlab/pinlab/internal/agent"
)

// The agent's ephemeral container, and the bounds of attaching and
// reading it.
const (
	// AgentContainer is the name of the ephemeral container that runs
	// pinlab-agent in a server pod; one found under that name is reused.
	AgentContainer = "pinlab-agent"
	// AttachTimeout bounds adding the agent to one pod and waiting for it
	// to run (the node pulls its image meanwhile).
	AttachTimeout = 60 * time.Second
	// AttachParallel is how many pods get their agent at once.
	AttachParallel = 16
	// agentLine bounds one line of the agent's output (a pod with 20 000
	// connections writes about 2.4 MB).
	agentLine = 8 << 20
)

// Agents is a Sampler that reads each pod's TCP connections from the
// output of pinlab-agent (cmd/pinlab-agent), an ephemeral container in the
// pod: it shares the pod's network namespace, reads its sockets every
// second (the kernel's sock_diag, as ss(8)) and prints each reading as a
// JSON line, which Agents follows through the API server's pods/log, as
// kubectl logs -f does. A Sample's counters are bytes, not calls: Unit
// says so; its Calls.Started is the bytes of the connections open at the
// reading.
//
// Prepare finds the agents already running and, with Attach and Image
// set, adds one to each pod that has none (PATCH pods/ephemeralcontainers,
// as kubectl debug does). An ephemeral container cannot be removed: it
// stays until the pod is replaced, and a later run reuses it. Safe for
// concurrent use; Close stops the log streams.
type Agents struct {
	// Config reaches the API server (Kube.Config); required.
	Config *rest.Config
	// Pod returns the namespace and name of the pod whose IP is ip
	// (Kube.PodByIP); required.
	Pod func(ip netip.Addr) (namespace, name string, ok bool)
	// Image is the agent's image, for pods without an agent; empty adds
	// none.
	Image string
	// Confirm is asked, once, before the agent is added to the pods named
	// (namespace, sorted names, image): the user's consent. nil adds none.
	Confirm func(namespace string, pods []string, image string) bool

	mu      sync.Mutex
	client  kubernetes.Interface
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	follows map[string]*follow // by namespace/name
	wg      sync.WaitGroup
}

// Unit reports that Agents' counters are bytes.
func (a *Agents) Unit() string { return "bytes" }

// follow is one pod's stream of agent readings, read by a goroutine of
// its Agents until the stream or the Agents ends.
type follow struct {
	mu      sync.Mutex
	latest  agent.Reading
	have    bool
	changed chan struct{} // closed and replaced at each reading
	err     error         // why the stream ended
	done    bool
	gave    time.Time // At of the reading next returned last
}

func (a *Agents) init() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return nil
	}
	if a.Config == nil || a.Pod == nil {
		return errors.New("agent: Config and Pod are required")
	}
	cs, err := kubernetes.NewForConfig(a.Config)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.client = cs
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.follows = map[string]*follow{}
	return nil
}

// AgentSecurity is the agent container's security context: what the
// Restricted Pod Security Standard asks (non-root, no privilege
// escalation, every capability dropped, the runtime's seccomp profile)
// and a read-only root filesystem.
func AgentSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To(int64(65532)),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// AgentState says whether pod p runs the agent: "running", "waiting:
// REASON: message" or "terminated: ...", or "" when it has none.
func AgentState(p *corev1.Pod) string {
	for _, s := range p.Status.EphemeralContainerStatuses {
		if s.Name != AgentContainer {
			continue
		}
		switch st := s.State; {
		case st.Running != nil:
			return "running"
		case st.Terminated != nil:
			return fmt.Sprintf("terminated: %s (exit code %d) %s", st.Terminated.Reason, st.Terminated.ExitCode, st.Terminated.Message)
		case st.Waiting != nil:
			return fmt.Sprintf("waiting: %s: %s", st.Waiting.Reason, st.Waiting.Message)
		}
		return "waiting: no state yet"
	}
	for _, e := range p.Spec.EphemeralContainers {
		if e.Name == AgentContainer {
			return "waiting: no status yet"
		}
	}
	return ""
}

// Prepare makes sure each of pods (those with an Addr) has a running
// agent: it reuses the one found; for the pods without one, when Image is
// set and Confirm agrees (asked once, with their names), it adds one.
// AttachParallel pods are handled at once, each bounded by AttachTimeout.
// It returns, by pod name, why a pod has no agent; a pod not in the map has
// one. It honours ctx.
func (a *Agents) Prepare(ctx context.Context, namespace string, pods []Pod) (map[string]string, error) {
	if err := a.init(); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var mu sync.Mutex
	fail := func(name string, err error) {
		mu.Lock()
		out[name] = err.Error()
		mu.Unlock()
	}
	var names []string
	for _, p := range pods {
		if p.Addr != "" {
			names = append(names, p.Name)
		}
	}
	var bare []string // pods with no agent at all
	each(ctx, names, func(ctx context.Context, name string) {
		p, err := a.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fail(name, apiError(err, "get pods"))
			return
		}
		switch state := AgentState(p); {
		case state == "running":
		case state == "":
			mu.Lock()
			bare = append(bare, name)
			mu.Unlock()
		case strings.HasPrefix(state, "terminated"):
			fail(name, fmt.Errorf("its %s container has ended (%s) and an ephemeral container cannot be restarted: only a new pod can have another", AgentContainer, state))
		default:
			if err := a.waitRunning(ctx, namespace, name); err != nil {
				fail(name, err)
			}
		}
	})
	if len(bare) == 0 || ctx.Err() != nil {
		return out, ctx.Err()
	}
	slices.Sort(bare)
	if a.Image == "" || a.Confirm == nil || !a.Confirm(namespace, bare, a.Image) {
		for _, name := range bare {
			out[name] = "no pinlab-agent runs in it"
		}
		return out, ctx.Err()
	}
	each(ctx, bare, func(ctx context.Context, name string) {
		err := a.attach(ctx, namespace, name)
		if err == nil {
			err = a.waitRunning(ctx, namespace, name)
		}
		if err != nil {
			fail(name, err)
		}
	})
	return out, ctx.Err()
}

// each runs f for every name, AttachParallel at once, each bounded by
// AttachTimeout, and waits for them.
func each(ctx context.Context, names []string, f func(ctx context.Context, name string)) {
	sem := make(chan struct{}, AttachParallel)
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			actx, cancel := context.WithTimeout(ctx, AttachTimeout)
			defer cancel()
			f(actx, name)
		}()
	}
	wg.Wait()
}

// attach adds the agent's ephemeral container to pod namespace/name, as
// kubectl debug does: a strategic merge patch of the ephemeralcontainers
// subresource.
func (a *Agents) attach(ctx context.Context, namespace, name string) error {
	c := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: AgentContainer, Image: a.Image, ImagePullPolicy: corev1.PullIfNotPresent,
		Args:                     []string{"--interval", "1s"},
		SecurityContext:          AgentSecurity(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []corev1.EphemeralContainer{c}}})
	if err != nil {
		return err
	}
	_, err = a.client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "ephemeralcontainers")
	if err != nil {
		return apiError(err, "patch pods/ephemeralcontainers")
	}
	return nil
}

// waitRunning polls the pod every half second until its agent runs; a
// pull error or an end is returned at once, naming the image.
func (a *Agents) waitRunning(ctx context.Context, namespace, name string) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		p, err := a.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil && ctx.Err() == nil:
			return apiError(err, "get pods")
		case err == nil:
			last = AgentState(p)
			if last == "running" {
				return nil
			}
			for _, bad := range []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerError", "terminated"} {
				if strings.Contains(last, bad) {
					return fmt.Errorf("its %s container (image %s) does not run: %s", AgentContainer, a.imageOf(p), last)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its %s container did not start within %v (last: %s)", AgentContainer, AttachTimeout, last)
		case <-tick.C:
		}
	}
}

func (a *Agents) imageOf(p *corev1.Pod) string {
	for _, e := range p.Spec.EphemeralContainers {
		if e.Name == AgentContainer {
			return e.Image
		}
	}
	return a.Image
}

// apiError says what the API server refused, naming the permission.
func apiError(err error, perm string) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the API server forbids it (RBAC: %s): %v", perm, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server refused the credentials: %v", err)
	}
	return err
}

// Sample returns the pod's first agent reading after the one returned
// before (or the latest one, at the first call), its connections on addr's
// port only. The first call for a pod starts following its agent's log.
func (a *Agents) Sample(ctx context.Context, addr netip.AddrPort) (Sample, error) {
	if err := a.init(); err != nil {
		return Sample{}, err
	}
	ns, name, ok := a.Pod(addr.Addr())
	if !ok {
		return Sample{}, fmt.Errorf("agent: no pod has the IP %s", addr.Addr())
	}
	f, err := a.follow(ns, name)
	if err != nil {
		return Sample{}, err
	}
	r, err := f.next(ctx)
	if err != nil {
		return Sample{}, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	return fromReading(r, addr.Port())
}

// follow returns the pod's log stream, starting it at the first call.
func (a *Agents) follow(ns, name string) (*follow, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ctx.Err() != nil {
		return nil, errors.New("agent: closed")
	}
	key := ns + "/" + name
	if f := a.follows[key]; f != nil && !f.ended() {
		return f, nil
	}
	f := &follow{changed: make(chan struct{})}
	a.follows[key] = f
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f.end(a.stream(f, ns, name))
	}()
	return f, nil
}

// stream reads the agent's log into f, following it, until the stream or
// the Agents ends. It asks for the last line and skips it: readings begin
// with the first one taken after the stream opened (not one from before
// diagnose's channelz connections closed, say).
func (a *Agents) stream(f *follow, ns, name string) error {
	req := a.client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: AgentContainer, Follow: true, TailLines: ptr.To(int64(1))})
	rc, err := req.Stream(a.ctx)
	if err != nil {
		return fmt.Errorf("reading its %s container's output: %w", AgentContainer, apiError(err, "get pods/log"))
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), agentLine)
	for first := true; sc.Scan(); first = false {
		var r agent.Reading
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.V == 0 || first {
			continue // not a reading (a line of another version, say), or the old one
		}
		f.put(r)
	}
	if err := sc.Err(); err != nil && a.ctx.Err() == nil {
		return fmt.Errorf("reading its %s container's output: %w", AgentContainer, err)
	}
	return fmt.Errorf("its %s container's output ended", AgentContainer)
}

func (f *follow) put(r agent.Reading) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest, f.have = r, true
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *follow) end(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.done = err, true
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *follow) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}

// next waits for a reading newer than the one it returned last (the
// latest, at the first call) or for ctx.
func (f *follow) next(ctx context.Context) (agent.Reading, error) {
	for {
		f.mu.Lock()
		r, have, done, err, ch := f.latest, f.have, f.done, f.err, f.changed
		fresh := have && (f.gave.IsZero() || r.At.After(f.gave))
		if fresh {
			f.gave = r.At
		}
		f.mu.Unlock()
		switch {
		case fresh && r.Err != "":
			return r, fmt.Errorf("its agent could not read the sockets: %s", r.Err)
		case fresh:
			return r, nil
		case done:
			return r, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return r, fmt.Errorf("no new reading from its %s container: %w", AgentContainer, ctx.Err())
		}
	}
}

// fromReading turns an agent reading into a Sample of the connections
// whose local port is port, counting bytes both ways.
func fromReading(r agent.Reading, port uint16) (Sample, error) {
	if !r.Bytes {
		return Sample{}, fmt.Errorf("its agent reads %s, which gives no byte counts", r.Source)
	}
	s := Sample{At: r.At, Sockets: map[int64]Socket{}}
	for _, c := range r.Conns {
		local, err := netip.ParseAddrPort(c.Local)
		if err != nil || local.Port() != port {
			continue
		}
		id, err := strconv.ParseUint(c.ID, 16, 64) // the socket's cookie
		if err != nil {
			continue
		}
		n := c.RX + c.TX
		s.Sockets[int64(id)] = Socket{Remote: c.Remote, Streams: n}
		s.Calls.Started += n
	}
	return s, nil
}

// Close stops following the agents' output and waits for its goroutines.
func (a *Agents) Close() error {
	a.mu.Lock()
	if a.cancel != nil {
		a.cancel()
	}
	a.mu.Unlock()
	a.wg.Wait()
	return nil
}
