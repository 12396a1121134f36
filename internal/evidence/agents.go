package evidence

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	// pinlab-agent in a server pod (AgentContainer-N for one added beside
	// N that cannot run); one found running is reused.
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
// Prepare finds the agents already running and, with Image set and the
// user's consent (Confirm), adds one to each pod where none can run (PATCH
// pods/ephemeralcontainers, as kubectl debug does). An ephemeral container
// cannot be removed: it stays until the pod is replaced, and a later run
// reuses it. Safe for concurrent use; Close stops the log streams.
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

	mu         sync.Mutex
	client     kubernetes.Interface
	ctx        context.Context // ends at Close
	cancel     context.CancelFunc
	follows    map[string]*follow // by namespace/name
	containers map[string]string  // the agent container Prepare chose, by namespace/name
	wg         sync.WaitGroup
}

// Unit reports that Agents' counters are bytes.
func (a *Agents) Unit() string { return "bytes" }

// Parallel is how many pods Collect samples at once through Agents: a
// Sample only waits for a reading its pod's stream brings.
func (a *Agents) Parallel() int { return 512 }

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
	cs, err := podClient(a.Config)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.client = cs
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.follows, a.containers = map[string]*follow{}, map[string]string{}
	return nil
}

// podClient is a clientset for cfg that allows 100 requests/s (burst
// 300): client-go's default 5/s would hold back AttachParallel pods polled
// twice a second, a log stream opened per pod, or a GET per pod for exec.
func podClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 100, 300
	return kubernetes.NewForConfig(c)
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

// agentRun is one agent container of a pod and its state.
type agentRun struct {
	name, image string
	// state is "running", "waiting: REASON: message", "terminated:
	// ...", or "waiting: no status yet"; reason is the waiting reason, or
	// "terminated".
	state, reason string
}

// brokenReasons are the waiting reasons of a container that will not run
// without a change (the kubelet's images and kuberuntime packages).
var brokenReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "ImageInspectError",
	"RegistryUnavailable", "SignatureValidationFailed", "CreateContainerError", "CreateContainerConfigError", "RunContainerError", "terminated"}

// broken reports whether the agent will never run: its image cannot be
// pulled or the container cannot be made, or it ended (an ephemeral
// container is not restarted).
func (r agentRun) broken() bool { return slices.Contains(brokenReasons, r.reason) }

// MaxAgents bounds the agent containers diagnose adds to one pod: one,
// and another beside each that cannot run, up to this many in all.
const MaxAgents = 3

// isAgentName reports whether name is an agent container's: AgentContainer,
// or AgentContainer-N for the ones added after a broken one.
func isAgentName(name string) bool {
	if name == AgentContainer {
		return true
	}
	n, ok := strings.CutPrefix(name, AgentContainer+"-")
	_, err := strconv.Atoi(n)
	return ok && err == nil
}

// agentRuns returns p's agent containers, in the order they were added.
func agentRuns(p *corev1.Pod) []agentRun {
	var out []agentRun
	for _, e := range p.Spec.EphemeralContainers {
		if !isAgentName(e.Name) {
			continue
		}
		r := agentRun{name: e.Name, image: e.Image, state: "waiting: no status yet"}
		for _, s := range p.Status.EphemeralContainerStatuses {
			if s.Name != e.Name {
				continue
			}
			switch st := s.State; {
			case st.Running != nil:
				r.state = "running"
			case st.Terminated != nil:
				r.state = fmt.Sprintf("terminated: %s (exit code %d) %s", st.Terminated.Reason, st.Terminated.ExitCode, st.Terminated.Message)
				r.reason = "terminated"
			case st.Waiting != nil:
				r.state = fmt.Sprintf("waiting: %s: %s", st.Waiting.Reason, st.Waiting.Message)
				r.reason = st.Waiting.Reason
			}
		}
		out = append(out, r)
	}
	return out
}

// agentPlan is what Prepare does with one pod: read the agent named
// run (running when running is true, else to wait for), or add one named
// add (why says what is wrong with the ones there, if any).
type agentPlan struct {
	run, add, why string
	running       bool
}

// planAgent decides, from p's agent containers, which one to read or
// what to add with image: nothing beside one of the same image that cannot
// run, nor beyond MaxAgents.
func planAgent(p *corev1.Pod, image string) agentPlan {
	runs := agentRuns(p)
	for _, r := range runs {
		if r.state == "running" {
			return agentPlan{run: r.name, running: true}
		}
	}
	for _, r := range runs {
		if !r.broken() {
			return agentPlan{run: r.name} // starting: wait for it
		}
	}
	if len(runs) == 0 {
		return agentPlan{add: AgentContainer, why: "no pinlab-agent runs in it"}
	}
	last := runs[len(runs)-1]
	why := fmt.Sprintf("its %s container (image %s) does not run (%s), and an ephemeral container can be neither removed nor restarted", last.name, last.image, last.state)
	next := 0
	for _, r := range runs {
		if n, ok := strings.CutPrefix(r.name, AgentContainer+"-"); ok {
			k, _ := strconv.Atoi(n)
			next = max(next, k)
		}
		if r.image == image {
			return agentPlan{why: why + "; another of the same image would not run either"}
		}
	}
	if len(runs) >= MaxAgents {
		return agentPlan{why: fmt.Sprintf("%s; it has %d agent containers that cannot run, the most diagnose adds", why, len(runs))}
	}
	return agentPlan{add: fmt.Sprintf("%s-%d", AgentContainer, next+1), why: why + "; another, of a pullable image, can be added beside it"}
}

// Prepare makes sure each of pods (those with an Addr) has a running
// agent: it reuses one that runs (or waits for one starting); for the pods
// without one, or whose agents cannot run (a bad image, ended), when Image
// is set and Confirm agrees (asked once, with their names), it adds one
// (named AgentContainer, else AgentContainer-N beside N broken ones).
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
	adds := map[string]agentPlan{} // pods to add an agent to
	each(ctx, names, func(ctx context.Context, name string) {
		plan, err := a.existing(ctx, namespace, name)
		switch {
		case err != nil:
			fail(name, err)
		case plan.add != "":
			mu.Lock()
			adds[name] = plan
			mu.Unlock()
		}
	})
	if len(adds) == 0 || ctx.Err() != nil {
		return out, ctx.Err()
	}
	bare := slices.Sorted(maps.Keys(adds))
	if a.Image == "" || a.Confirm == nil || !a.Confirm(namespace, bare, a.Image) {
		for _, name := range bare {
			out[name] = adds[name].why
		}
		return out, ctx.Err()
	}
	each(ctx, bare, func(ctx context.Context, name string) {
		err := a.attach(ctx, namespace, name, adds[name].add)
		if err == nil {
			err = a.use(ctx, namespace, name, adds[name].add)
		}
		if err != nil {
			fail(name, err)
		}
	})
	return out, ctx.Err()
}

// existing reads the pod's agent when one runs (waiting for one that
// starts), or says what to add; an error when it has none and none can
// be added.
func (a *Agents) existing(ctx context.Context, namespace, name string) (agentPlan, error) {
	p, err := a.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return agentPlan{}, apiError(err, "get pods")
	}
	switch plan := planAgent(p, a.Image); {
	case plan.add != "":
		return plan, nil
	case plan.run == "":
		return plan, errors.New(plan.why)
	case plan.running:
		return plan, a.read(namespace, name, plan.run)
	default:
		return plan, a.use(ctx, namespace, name, plan.run)
	}
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

// attach adds the agent's ephemeral container, named container, to pod
// namespace/name, as kubectl debug does: a strategic merge patch of the
// ephemeralcontainers subresource.
func (a *Agents) attach(ctx context.Context, namespace, name, container string) error {
	c := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: container, Image: a.Image, ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"--interval", "1s"},
		SecurityContext: AgentSecurity(),
		// The default TerminationMessagePolicy (File): FallbackToLogs
		// would copy client addresses into the pod's status, which
		// readers of pods see without pods/log.
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

// use waits until the pod's agent container runs (polling the pod every
// half second; an error at once, naming the image, when it cannot run)
// and makes it the one Sample reads.
func (a *Agents) use(ctx context.Context, namespace, name, container string) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := "not seen yet"
	for {
		p, err := a.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil && ctx.Err() == nil:
			return apiError(err, "get pods")
		case err == nil:
			for _, r := range agentRuns(p) {
				switch {
				case r.name != container:
				case r.state == "running":
					return a.read(namespace, name, container)
				case r.broken():
					return fmt.Errorf("its %s container (image %s) does not run: %s", r.name, r.image, r.state)
				default:
					last = r.state
				}
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("its %s container did not start within %v (last: %s)", container, AttachTimeout, last)
			}
			return fmt.Errorf("waiting for its %s container: %w", container, ctx.Err())
		case <-tick.C:
		}
	}
}

// read makes the pod's agent container the one Sample reads and starts
// following its output, so that its first reading is on its way by the
// first sample.
func (a *Agents) read(namespace, name, container string) error {
	a.mu.Lock()
	a.containers[namespace+"/"+name] = container
	a.mu.Unlock()
	_, err := a.follow(namespace, name)
	return err
}

// apiError says what the API server refused, naming the permission.
func apiError(err error, perm string) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the API server forbids it (RBAC: %s): %w", perm, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server refused the credentials: %w", err)
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
	container := cmp.Or(a.containers[key], AgentContainer)
	go func() {
		defer a.wg.Done()
		f.end(a.stream(f, ns, name, container))
	}()
	return f, nil
}

// stream reads the agent's log into f, following it, until the stream or
// the Agents ends. It asks for the last line and skips it, so that
// readings begin after the stream opened (not with one from before
// diagnose's channelz connections closed, say); when the agent had
// printed nothing yet, the first new reading is the one skipped.
func (a *Agents) stream(f *follow, ns, name, container string) error {
	req := a.client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container, Follow: true, TailLines: ptr.To(int64(1))})
	rc, err := req.Stream(a.ctx)
	if err != nil {
		return fmt.Errorf("reading its %s container's output: %w", container, apiError(err, "get pods/log"))
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), agentLine)
	for first := true; sc.Scan(); first = false {
		var r agent.Reading
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.V != agent.FormatVersion || first {
			continue // not a reading of this format, or the last one from before the stream
		}
		f.put(r)
	}
	if err := sc.Err(); err != nil && a.ctx.Err() == nil {
		return fmt.Errorf("reading its %s container's output: %w", container, err)
	}
	return fmt.Errorf("its %s container's output ended", container)
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
