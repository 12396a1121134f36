package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/podlog"
	"github.com/pinlab/pinlab/internal/podnet"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
)

// podWorker owns one pod's lifetime on the node: IP, containers (restarts),
// probes, status and termination. Its goroutine (run) is the only writer of
// the pod's status and the only one that changes its state; other
// goroutines talk to it through channels.
type podWorker struct {
	k   *Kubelet
	key string

	mu      sync.Mutex
	pod     *corev1.Pod
	vanish  bool
	unready bool                           // readiness forced false (SetReady), as a failing probe
	cur     *container                     // the running container, nil when none
	outs    [2]*podlog.Log                 // the latest container run's output and the one's before
	changed chan struct{}                  // cap 1: a newer pod state, vanish or unready is waiting
	netns   atomic.Pointer[podnet.Sandbox] // sandbox, for other goroutines (Shell)
	eph     map[string]*ephemeral          // ephemeral containers by name (ephemeral.go)
	ephWG   sync.WaitGroup                 // the agents' goroutines

	probed  chan probeResult // from probe goroutines
	stopped chan error       // cap 1: the end of a stop sequence
	tasks   sync.WaitGroup   // stop sequences

	// Worker goroutine only.
	ip         netip.Addr // allocated by the dispatcher, in pod order
	ipErr      error
	sandbox    *podnet.Sandbox // the pod's network namespace (Config.PodNetwork), nil when none
	released   bool
	wl         workload.Container
	cmd        string               // the image's command the container runs instead of the pod's servers (workload.Command), or ""
	backoff    *flowcontrol.Backoff // crash-loop back-off, as the kubelet's
	restart    *time.Timer          // pending restart after a back-off
	restarts   int32
	deleting   bool
	finishedAt time.Time                        // when the last container ended (monotonic)
	term       *corev1.ContainerStateTerminated // how the last container ended, until the next starts
	lastTerm   *corev1.ContainerStateTerminated // how the one before the running one ended
	final      bool                             // the container will not run again (restartPolicy)
	waiting    string                           // why no container runs, if none does
	message    string                           // status message: why not running, or probe failures
	probeMsg   [3]string                        // latest failure of each probe kind
	reported   bool                             // the Ready condition last written
}

func newPodWorker(k *Kubelet, p *corev1.Pod) *podWorker {
	return &podWorker{
		k: k, key: p.Namespace + "/" + p.Name, pod: p, changed: make(chan struct{}, 1),
		probed: make(chan probeResult, 8), stopped: make(chan error, 1),
		backoff: flowcontrol.NewBackOff(k.cfg.RestartBackoff, 30*k.cfg.RestartBackoff),
	}
}

// setUnready forces the pod's readiness false (true) or gives it back to the
// probe (false).
func (w *podWorker) setUnready(v bool) {
	w.mu.Lock()
	w.unready = v
	w.mu.Unlock()
	w.notify()
}

// isReady is the Ready condition to report: the running container's
// readiness verdict unless readiness is forced false.
func (w *podWorker) isReady() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur != nil && w.cur.ready && !w.unready
}

func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.pod = p
	w.mu.Unlock()
	w.notify()
}

// gone tells the worker its pod object was removed from the API.
func (w *podWorker) gone() {
	w.mu.Lock()
	w.vanish = true
	w.mu.Unlock()
	w.notify()
}

func (w *podWorker) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWorker) latest() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.vanish
}

func (w *podWorker) log() func(msg string, args ...any) {
	return w.k.cfg.Logger.With("pod", w.key).Info
}

// event reports a lifecycle event through Config.Events, and writes it
// to the running container's output.
func (w *podWorker) event(p *corev1.Pod, name string) {
	if f := w.k.cfg.Events; f != nil {
		f(p, name, time.Now())
	}
	text := eventText[name]
	if t, ok := commandEventText[name]; ok && w.cmd != "" {
		text = t
	}
	if text != "" {
		w.say("%s", text)
	}
}

// commandEventText is what a container of the image's other commands
// (its load client, its xDS control plane) writes instead, where it
// differs: it has no calls of a pod's to drain.
var commandEventText = map[string]string{
	"sigterm":            "SIGTERM: stopping",
	"graceful-stop-done": "stopped, exiting",
}

// eventText is what a container writes at a lifecycle event, as a pinlab
// pod's process would.
var eventText = map[string]string{
	"prestop-start":      "preStop hook running",
	"prestop-done":       "preStop hook done",
	"sigterm":            "SIGTERM: draining, GOAWAY sent on every connection",
	"graceful-stop-done": "drained: every call finished, exiting",
	"hard-stop":          "grace period over: stopping at once",
	"killed":             "killed (SIGKILL)",
	"hung":               "hung: not answering",
	"unhung":             "answering again",
}

// say writes a line to the running container's output.
func (w *podWorker) say(format string, args ...any) {
	w.mu.Lock()
	out := w.outs[0]
	w.mu.Unlock()
	if out != nil {
		out.Printf(format, args...)
	}
}

// running returns the running container, for Kill and Hang.
func (w *podWorker) running() (*container, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, w.key)
	}
	return w.cur, nil
}

// run brings the pod up and keeps it as its spec says until it is deleted
// (then it terminates gracefully and removes the object) or ctx ends or the
// object vanishes (then it stops at once).
func (w *podWorker) run(ctx context.Context) {
	defer w.tasks.Wait()
	defer w.stopEphemeral()
	p, _ := w.latest()
	if w.ipErr == nil && w.k.cfg.PodNetwork != nil {
		w.sandbox, w.ipErr = w.k.cfg.PodNetwork.Add(ctx, string(p.UID), w.ip)
		w.netns.Store(w.sandbox)
		if w.ipErr != nil {
			w.k.cfg.Logger.Warn("kubelet: creating the pod's network", "pod", w.key, "err", w.ipErr)
		}
	}
	if w.ipErr != nil {
		w.waiting, w.message = "FailedCreatePodSandBox", w.ipErr.Error()
		w.writeStatus(ctx)
		w.idle(ctx)
		return
	}
	spec, pull := w.k.pinlabSpec(&p.Spec)
	if pull != "" {
		w.waiting, w.message = "ErrImagePull", pull
		w.writeStatus(ctx)
		w.idle(ctx)
		return
	}
	forSpec := workload.For
	if w.cmd = workload.Command(spec); w.cmd != "" {
		forSpec = workload.ForCommand
	}
	wl, err := forSpec(spec)
	if err != nil {
		w.waiting, w.message = "CreateContainerConfigError", err.Error()
		w.writeStatus(ctx)
		w.idle(ctx)
		return
	}
	w.wl = wl
	w.startContainer(ctx)
	w.syncEphemeral(p)
	for !w.step(ctx) {
	}
}

// step handles one event; it returns true when the pod is done with.
func (w *podWorker) step(ctx context.Context) bool {
	var exited <-chan struct{}
	if c := w.cur; c != nil && !c.stopping {
		exited = c.srv.Done()
	}
	var restart <-chan time.Time
	if w.restart != nil {
		restart = w.restart.C
	}
	select {
	case <-ctx.Done():
		w.abort(ctx)
		return true
	case <-w.changed:
		return w.onChange(ctx)
	case r := <-w.probed:
		w.onProbe(ctx, r)
	case <-exited:
		c := w.cur
		code, reason, msg := w.exitCode(c, nil)
		w.exited(c, code, reason, msg)
		return w.afterExit(ctx, false)
	case err := <-w.stopped:
		c := w.cur
		code, reason, msg := w.exitCode(c, err)
		w.exited(c, code, reason, msg)
		return w.afterExit(ctx, c.reason != killDeleted)
	case <-restart:
		w.restart = nil
		w.tryRestart(ctx)
	}
	return false
}

// onChange handles a new pod state: deletion starts the termination, a
// vanished object stops everything at once.
func (w *podWorker) onChange(ctx context.Context) bool {
	p, vanished := w.latest()
	if vanished {
		w.abort(ctx)
		return true
	}
	if p.DeletionTimestamp != nil && !w.deleting {
		w.deleting = true
		w.log()("terminating")
		if w.restart != nil {
			w.restart.Stop()
			w.restart = nil
		}
		c := w.cur
		if c == nil {
			w.finishPod(ctx)
			return true
		}
		c.deleting.Store(true)
		if !c.stopping {
			w.beginStop(ctx, c, killDeleted)
		}
	}
	if !w.deleting {
		w.syncEphemeral(p)
	}
	if w.isReady() != w.reported || w.ephemeralChanged(p) {
		w.writeStatus(ctx)
	}
	return false
}

// onProbe applies one probe result of the running container.
func (w *podWorker) onProbe(ctx context.Context, r probeResult) {
	c := r.c
	if c != w.cur {
		return // from a container that is gone
	}
	msg := ""
	if r.err != nil {
		msg = fmt.Sprintf("%s probe failed: %v", r.kind, r.err)
	}
	// The kubelet reports probe failures as events; the lab has none, so
	// the latest failure shows in status.message. The default readiness
	// check reports only when the server has not answered for a while.
	p, _ := w.latest()
	explicit := probeSpec(&p.Spec.Containers[0], r.kind) != nil
	write := w.probeMsg[r.kind] != msg && (explicit || r.err == nil || r.failRun >= 20)
	if write {
		w.probeMsg[r.kind] = msg
	}
	switch {
	case !r.set:
	case r.kind == readiness && c.ready != (r.err == nil):
		c.ready = r.err == nil
		write = true
		if c.ready {
			w.say("ready: the readiness check passed")
		} else {
			w.say("not ready: %s", msg)
		}
	case r.kind == startup && r.err == nil:
		write = true // Started turns true
		c.ready = c.ready || (w.cmd != "" && p.Spec.Containers[0].ReadinessProbe == nil)
	case r.kind != readiness && r.err != nil && !c.stopping && !w.deleting:
		reason := killLiveness
		if r.kind == startup {
			reason = killStartup
		}
		w.log()("probe failed, restarting", "probe", r.kind)
		w.say("%s; the kubelet restarts the container", msg)
		w.beginStop(ctx, c, reason)
	}
	if write {
		w.writeStatus(ctx)
	}
}

// afterExit decides what follows a container's end: the pod's removal when
// it is being deleted, else a restart as restartPolicy says (Always; on
// OnFailure after a non-zero exit or a probe kill, as the kubelet's
// computePodActions), after the crash-loop back-off.
func (w *podWorker) afterExit(ctx context.Context, probeKill bool) bool {
	if w.deleting {
		w.finishPod(ctx)
		return true
	}
	p, _ := w.latest()
	switch p.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		w.final = true
	case corev1.RestartPolicyOnFailure:
		w.final = w.term.ExitCode == 0 && !probeKill
	}
	if w.final {
		w.writeStatus(ctx)
		return false
	}
	w.tryRestart(ctx)
	return false
}

// backoffKey names the container in the worker's back-off (one container
// per pod).
const backoffKey = "container"

// tryRestart starts the container again unless it is in back-off, as the
// kubelet's doBackOff: the first restart is immediate and sets the back-off
// to RestartBackoff; each later exit within the back-off waits out the
// back-off counted from the exit, and each restart doubles it up to 30
// times RestartBackoff (5 min by default). A back-off not renewed for twice
// its maximum starts over.
func (w *podWorker) tryRestart(ctx context.Context) {
	p, _ := w.latest()
	if w.backoff.IsInBackOffSince(backoffKey, w.finishedAt) {
		d := w.backoff.Get(backoffKey)
		w.waiting = "CrashLoopBackOff"
		w.message = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, p.Spec.Containers[0].Name, p.Name, p.Namespace, p.UID)
		w.writeStatus(ctx)
		w.restart = time.NewTimer(time.Until(w.finishedAt.Add(d)))
		return
	}
	w.backoff.Next(backoffKey, w.finishedAt)
	w.restarts++
	w.lastTerm, w.message = w.term, ""
	w.probeMsg = [3]string{}
	w.startContainer(ctx)
}

// finishPod ends a deleted pod: its status shows the container terminated,
// its address goes dead (refused or blackholed), and the object is removed
// with grace period zero, as the kubelet does once the pod's containers and
// sandbox are gone.
func (w *podWorker) finishPod(ctx context.Context) {
	p, _ := w.latest()
	w.final = true
	w.writeStatus(ctx)
	w.deadAddress(ctx)
	w.k.finish(ctx, p)
}

// abort stops at once, for a node shutting down (ctx ended) or a pod object
// that vanished without a graceful deletion.
func (w *podWorker) abort(ctx context.Context) {
	if c := w.cur; c != nil {
		c.srv.Kill()
		if c.stopping {
			<-w.stopped
		}
		w.exited(c, 137, "Error", "")
	}
	if w.restart != nil {
		w.restart.Stop()
	}
	if _, vanished := w.latest(); vanished && ctx.Err() == nil {
		w.deadAddress(ctx)
		return
	}
	w.releaseIP()
}

// idle waits for a pod that cannot run to be deleted, then removes it.
func (w *podWorker) idle(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			w.releaseIP()
			return
		case <-w.changed:
			p, vanished := w.latest()
			if vanished {
				w.releaseIP()
				return
			}
			if p.DeletionTimestamp != nil {
				w.releaseIP()
				w.k.finish(ctx, p)
				return
			}
		}
	}
}

// deadAddress gives up the pod's address: released to the pool (connects
// are refused), or with Config.DeadAddress "blackhole" kept out of the pool
// and its serving ports (gRPC, and HTTP if any) blackholed until the
// kubelet stops.
func (w *podWorker) deadAddress(ctx context.Context) {
	if w.released || !w.ip.IsValid() {
		return
	}
	if w.k.cfg.DeadAddress == DeadBlackhole && w.wl.Port != 0 {
		ports := []int{w.wl.Port}
		if w.wl.HTTPPort != 0 {
			ports = append(ports, w.wl.HTTPPort)
		}
		if w.k.blackhole(ctx, w.ip, ports, w.sandbox) {
			w.released, w.sandbox = true, nil // the kubelet owns them now
			w.netns.Store(nil)
			return
		}
	}
	w.releaseIP()
}

// releaseIP removes the pod's network namespace, if any, and returns its
// address to the pool; later calls do nothing. An address whose network
// could not be torn down (the CNI plugins may still hold it) stays out of
// the pool.
func (w *podWorker) releaseIP() {
	if w.sandbox != nil {
		w.netns.Store(nil)
		err := w.k.removeSandbox(w.sandbox)
		w.sandbox = nil
		if err != nil {
			w.released = true
		}
	}
	if w.ip.IsValid() && !w.released {
		w.k.cfg.PodIPs.Release(w.ip)
		w.released = true
	}
}
