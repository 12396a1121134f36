package kubelet

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podlog"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// container is one run of a pod's container: its process (the pod's
// servers, or the image's load client), its probe goroutines and what the
// kubelet knows about it. A restart makes a new container.
type container struct {
	srv     process
	out     *podlog.Log  // its standard output, as kubectl logs reads it
	calls   *callCounter // what it served, summarized to out
	started metav1.Time
	cancel  context.CancelFunc // ends the probe goroutines
	probes  sync.WaitGroup

	startedOK atomic.Bool // the startup probe succeeded (at once without one)
	deleting  atomic.Bool // the pod is being deleted: liveness and startup probes stop

	// Worker goroutine only.
	ready    bool       // the readiness verdict
	stopping bool       // a stop sequence runs
	reason   killReason // why it is being stopped

	// Guarded by podWorker.mu.
	killed bool // Kubelet.Kill was called
	hung   bool // Kubelet.Hang(true) is in effect
}

// startContainer runs a new container for the pod: its process on the pod
// IP (the pod's servers, a pod.Process: a pod.Server, and a pod.WebServer
// for a pod with an HTTP port; or another of the image's commands, a
// commandProcess: its load client or its xDS control plane)
// and its probe goroutines. A process that cannot start counts as a
// container that exited at once with code 1.
func (w *podWorker) startContainer(ctx context.Context) {
	p, _ := w.latest()
	c := &container{out: podlog.New(), calls: &callCounter{}, started: metav1.Now()}
	w.mu.Lock()
	w.outs[0], w.outs[1] = c.out, w.outs[0]
	w.mu.Unlock()
	cfg, adminPort, token, err := w.newProcess(ctx, p, c)
	if err == nil {
		err = c.srv.Start(ctx)
	}
	if err != nil {
		c.out.Printf("pinlab %s %s: cannot start: %v", w.command(), w.key, err)
		w.exited(c, 1, "Error", err.Error())
		w.afterExit(ctx, false)
		return
	}
	spec := &p.Spec.Containers[0]
	c.startedOK.Store(spec.StartupProbe == nil)
	// Kubernetes reports a container without a readinessProbe Ready once
	// it started (onProbe: after its startup probe); the lab waits for a
	// pod's server to answer first.
	c.ready = w.cmd != "" && spec.ReadinessProbe == nil && spec.StartupProbe == nil
	w.mu.Lock()
	w.cur = c
	w.mu.Unlock()
	w.waiting, w.term = "", nil
	if w.cmd != "" {
		w.log()("started", "ip", w.ip, "command", w.cmd, "restarts", w.restarts)
	} else {
		w.log()("started", "ip", w.ip, "port", cfg.GRPC.Addr.Port(), "httpPort", w.wl.HTTPPort, "restarts", w.restarts)
		c.out.Printf("pinlab pod %s: serving gRPC (health, channelz) on %s%s, restart %d", w.key, cfg.GRPC.Addr, httpText(w.wl.HTTPPort), w.restarts)
	}
	if w.restarts > 0 {
		w.event(p, "restarted")
	}
	pctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	if adminPort != 0 {
		if err := w.serveAdmin(pctx, p, c, adminPort, token); err != nil {
			c.out.Printf("pinlab pod %s: %v", w.key, err)
			c.srv.Kill() // the process ends, as the image's does
		}
	}
	if w.cmd == "" {
		c.probes.Add(1)
		go func() {
			defer c.probes.Done()
			c.summarize(pctx, callSummaryEvery)
		}()
	}
	w.startProbes(pctx, c, spec, int(cfg.GRPC.Addr.Port()))
	w.writeStatus(ctx)
}

// newProcess makes container c's process (c.srv) for pod p: the image's
// command the container runs, or the pod's servers, for which it also
// returns their config and the admin endpoint's port (0: none) and token.
func (w *podWorker) newProcess(ctx context.Context, p *corev1.Pod, c *container) (cfg pod.ProcessConfig, adminPort int, token string, err error) {
	switch w.cmd {
	case workload.LoadCommand:
		c.srv, err = w.loadProcess(ctx, p, c.out)
	case workload.XDSCommand:
		c.srv, err = w.xdsProcess(p, c.out)
	default:
		cfg, adminPort, token, err = w.podProcess(ctx, p, c.calls)
		c.srv = pod.NewProcess(cfg)
	}
	return cfg, adminPort, token, err
}

// startProbes starts container c's probe goroutines, owned by c.probes
// and ended with pctx: each probe the spec has, and for the pod's
// servers (port: their gRPC port) a readiness check without one.
func (w *podWorker) startProbes(pctx context.Context, c *container, spec *corev1.Container, port int) {
	for _, k := range []probeKind{readiness, liveness, startup} {
		ps := probeSpec(spec, k)
		if ps == nil && (k != readiness || w.cmd != "") {
			continue
		}
		pr := &prober{kind: k, probe: ps, c: spec, podIP: w.ip, port: port, nodeIP: w.k.cfg.NodeIP}
		c.probes.Add(1)
		go func() {
			defer c.probes.Done()
			w.runProbe(pctx, c, pr)
		}()
	}
}

// command is the image's subcommand the pod's container runs.
func (w *podWorker) command() string {
	return cmp.Or(w.cmd, "pod")
}

// podProcess returns the config of the process of pod p's servers, on
// the pod IP, reporting to calls, and its admin endpoint's port (0: none)
// and token.
func (w *podWorker) podProcess(ctx context.Context, p *corev1.Pod, calls *callCounter) (cfg pod.ProcessConfig, adminPort int, token string, err error) {
	cfg, err = w.k.containerConfig(p, w.ip)
	if err == nil {
		cfg = w.wire(p, cfg, calls)
	}
	adminPort, token, aerr := w.adminConfig(ctx, p)
	if err == nil {
		err = aerr
	}
	return cfg, adminPort, token, err
}

// wire gives the container's servers the pod's network namespace (with
// Config.PodNetwork) and their observer: calls, which counts for the
// container's output and passes on to Config.Observe's.
func (w *podWorker) wire(p *corev1.Pod, cfg pod.ProcessConfig, calls *callCounter) pod.ProcessConfig {
	if w.sandbox != nil {
		cfg.GRPC.Netns = w.sandbox
		if cfg.Web != nil {
			cfg.Web.Netns = w.sandbox
		}
	}
	if w.k.cfg.Observe != nil {
		calls.next = w.k.cfg.Observe(p)
	}
	cfg.GRPC.Observer = calls
	if cfg.Web != nil {
		cfg.Web.Observer = calls
	}
	return cfg
}

func probeSpec(c *corev1.Container, k probeKind) *corev1.Probe {
	return [...]*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe}[k]
}

// runProbe checks one probe of c every period, from the container's start,
// and sends the results to the worker until ctx ends. As the kubelet's
// prober worker: checks are gated by due; liveness and startup probes stop
// when the pod is being deleted, and after their verdict turns to failure
// (the container is then restarted with new probes); the startup probe
// stops once it succeeded. The lab's default readiness check stops after
// its first success: the container stays Ready while it runs.
func (w *podWorker) runProbe(ctx context.Context, c *container, pr *prober) {
	t := time.NewTicker(pr.period())
	defer t.Stop()
	run := newProbeRun(pr.probe)
	fails := 0
	for {
		if c.deleting.Load() && pr.kind != readiness {
			return
		}
		if due(pr.kind, pr.probe, time.Since(c.started.Time), c.startedOK.Load()) {
			err := pr.check(ctx)
			if ctx.Err() != nil {
				return
			}
			set := run.observe(err == nil)
			if err != nil {
				fails++
			} else {
				fails = 0
			}
			if set && err == nil && pr.kind == startup {
				c.startedOK.Store(true)
			}
			select {
			case w.probed <- probeResult{c: c, kind: pr.kind, err: err, set: set, failRun: fails}:
			case <-ctx.Done():
				return
			}
			if set && (pr.kind == startup || (pr.kind == liveness && err != nil) || (pr.probe == nil && err == nil)) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beginStop starts c's stop sequence on a goroutine of the worker; its end
// arrives on w.stopped.
func (w *podWorker) beginStop(ctx context.Context, c *container, reason killReason) {
	p, _ := w.latest()
	c.stopping, c.reason = true, reason
	grace := gracePeriod(p, reason)
	hook := w.wl.PreStop
	w.log()("stopping", "reason", reason, "grace", time.Duration(grace)*time.Second)
	w.tasks.Add(1)
	go func() {
		defer w.tasks.Done()
		w.stopped <- w.stopSequence(ctx, c, p, grace, hook)
	}()
}

// stopSequence is the kubelet's killContainer: the preStop hook, bounded by
// the grace period (executePreStopHook), then SIGTERM (the server's Stop:
// health NOT_SERVING, the app's drain delay, grpc-go GracefulStop) with
// stopTimeout left before SIGKILL (the hard stop). It returns Stop's error:
// nil when the server drained in time.
func (w *podWorker) stopSequence(ctx context.Context, c *container, p *corev1.Pod, grace int64, hook *workload.Hook) error {
	start := time.Now()
	var ran time.Duration
	if hook != nil && grace > 0 {
		w.event(p, "prestop-start")
		bound := time.NewTimer(min(hook.Sleep, time.Duration(grace)*time.Second))
		select {
		case <-bound.C:
		case <-c.srv.Done(): // killed meanwhile: the hook dies with the container
		case <-ctx.Done():
		}
		bound.Stop()
		ran = time.Since(start)
		w.event(p, "prestop-done")
	}
	w.event(p, "sigterm")
	sctx, cancel := context.WithTimeout(ctx, stopTimeout(grace, ran))
	defer cancel()
	err := c.srv.Stop(sctx)
	w.mu.Lock()
	killed := c.killed
	w.mu.Unlock()
	switch {
	case err == nil:
		w.event(p, "graceful-stop-done")
	case !killed:
		w.event(p, "hard-stop")
	}
	return err
}

// exited records that c ended with code (reason, message), stops its probes
// and forgets it as the running container.
func (w *podWorker) exited(c *container, code int32, reason, message string) {
	if c.cancel != nil {
		c.cancel()
		c.probes.Wait()
	}
	w.mu.Lock()
	if w.cur == c {
		w.cur = nil
	}
	w.mu.Unlock()
	now := time.Now()
	w.finishedAt = now
	w.term = &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: message,
		StartedAt: c.started, FinishedAt: metav1.NewTime(now),
	}
	w.log()("exited", "code", code, "reason", reason)
	if message != "" {
		reason += ": " + message
	}
	c.out.Printf("exited with code %d (%s)", code, reason)
	c.out.Close()
}

// httpText says on which port a pod serves HTTP, if it does.
func httpText(port int) string {
	if port == 0 {
		return ""
	}
	return fmt.Sprintf(" and HTTP, WebSocket on port %d", port)
}

// exitCode returns how a container whose process stopped ended: 137
// (SIGKILL) when killed or stopped hard, 0 after a graceful stop or an
// exit 0 of its own, its code (1 for the pod's servers) when it failed on
// its own.
func (w *podWorker) exitCode(c *container, stopErr error) (int32, string, string) {
	w.mu.Lock()
	killed := c.killed
	w.mu.Unlock()
	switch {
	case killed:
		return 137, "Error", ""
	case c.srv.Err() != nil:
		err := c.srv.Err()
		return exitCodeOf(err), "Error", err.Error()
	case stopErr != nil:
		return 137, "Error", ""
	}
	return 0, "Completed", ""
}
