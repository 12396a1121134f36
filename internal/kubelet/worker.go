package kubelet

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/pod"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultProbeInterval is how often the lab's default readiness check (for
// containers without a readinessProbe) retries until the server first
// answers.
const defaultProbeInterval = 50 * time.Millisecond

// podWorker owns one pod's lifetime on the node: IP, server, probes, status
// and termination. Its goroutine is the only writer of the pod's status.
type podWorker struct {
	k   *Kubelet
	key string

	mu      sync.Mutex
	pod     *corev1.Pod
	vanish  bool
	unready bool          // readiness forced false (SetReady), as a failing probe
	changed chan struct{} // cap 1: a newer pod state, vanish or unready is waiting

	// State reported in status; touched only by the worker goroutine.
	ip       netip.Addr // allocated by the dispatcher, in pod order
	ipErr    error
	released bool
	started  metav1.Time
	ready    bool   // the probe's verdict
	reported bool   // the Ready condition last written
	waiting  string // reason the container is not running, if any
	message  string
}

// setUnready forces the pod's readiness false (true) or gives it back to the
// probe (false).
func (w *podWorker) setUnready(v bool) {
	w.mu.Lock()
	w.unready = v
	w.mu.Unlock()
	w.notify()
}

// isReady is the Ready condition to report: the probe's verdict unless
// readiness is forced false.
func (w *podWorker) isReady() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready && !w.unready
}

func newPodWorker(k *Kubelet, p *corev1.Pod) *podWorker {
	return &podWorker{k: k, key: p.Namespace + "/" + p.Name, pod: p, changed: make(chan struct{}, 1)}
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

// run brings the pod up, keeps its readiness current, and tears it down when
// the pod is deleted (gracefully) or ctx ends (at once).
func (w *podWorker) run(ctx context.Context) {
	p, _ := w.latest()
	defer w.releaseIP()
	if w.ipErr != nil {
		w.waiting, w.message = "FailedCreatePodSandBox", w.ipErr.Error()
		w.writeStatus(ctx)
		w.idle(ctx)
		return
	}
	srv, pr, err := w.start(ctx, p)
	if err != nil {
		w.waiting, w.message = "CreateContainerConfigError", err.Error()
		w.writeStatus(ctx)
		w.idle(ctx)
		return
	}
	w.started = metav1.Now()
	w.writeStatus(ctx)
	if w.probeLoop(ctx, pr) {
		srv.Kill()
		return
	}
	w.terminate(ctx, srv)
}

func (w *podWorker) start(ctx context.Context, p *corev1.Pod) (*pod.Server, *prober, error) {
	cfg, err := containerConfig(p, w.ip)
	if err != nil {
		return nil, nil, err
	}
	if w.k.cfg.Observe != nil {
		cfg.Observer = w.k.cfg.Observe(p)
	}
	srv := pod.New(cfg)
	if err := srv.Start(ctx); err != nil {
		return nil, nil, err
	}
	w.log()("started", "ip", w.ip, "port", cfg.Addr.Port())
	pr := &prober{probe: p.Spec.Containers[0].ReadinessProbe, pod: p, podIP: w.ip, port: int(cfg.Addr.Port()), nodeIP: w.k.cfg.NodeIP}
	return srv, pr, nil
}

// idle waits for a pod that cannot run to be deleted, then removes it.
func (w *podWorker) idle(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
			p, vanished := w.latest()
			if vanished {
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

// probeLoop runs readiness checks until the pod is being deleted (returns
// false) or ctx ends or the object vanished (returns true: stop at once).
// Without a readinessProbe the pod turns Ready when its server first answers
// a gRPC health check and is not probed again; with one, the probe's
// initialDelaySeconds, periodSeconds, successThreshold and failureThreshold
// apply as in the kubelet.
func (w *podWorker) probeLoop(ctx context.Context, pr *prober) (stopNow bool) {
	interval, delay := defaultProbeInterval, time.Duration(0)
	success, failure := int32(1), int32(1)
	if pr.probe != nil {
		interval = time.Duration(pr.probe.PeriodSeconds) * time.Second
		delay = time.Duration(pr.probe.InitialDelaySeconds) * time.Second
		success, failure = pr.probe.SuccessThreshold, pr.probe.FailureThreshold
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var okRun, failRun int32
	probing := true
	for {
		select {
		case <-ctx.Done():
			return true
		case <-w.changed:
			p, vanished := w.latest()
			if vanished {
				return true
			}
			if p.DeletionTimestamp != nil {
				return false
			}
			if w.isReady() != w.reported {
				w.writeStatus(ctx)
			}
		case <-timer.C:
			if !probing {
				continue
			}
			before := w.message
			if err := pr.check(ctx); err != nil {
				okRun, failRun = 0, failRun+1
				w.message = "readiness probe failed: " + err.Error()
			} else {
				okRun, failRun = okRun+1, 0
				w.message = ""
			}
			switch {
			case !w.ready && okRun >= success:
				w.ready = true
				w.writeStatus(ctx)
			case w.ready && failRun >= failure:
				w.ready = false
				w.writeStatus(ctx)
			case w.message != before && (pr.probe != nil || failRun >= 20):
				// The kubelet reports probe failures as events; the lab
				// has none, so the latest failure shows in status.message.
				w.writeStatus(ctx)
			}
			if pr.probe == nil && w.ready {
				probing = false
				continue
			}
			timer.Reset(interval)
		}
	}
}

// terminate runs the termination sequence of a deleted pod: the server's
// graceful stop (GOAWAY, in-flight calls may finish) bounded by the pod's
// deletion grace period, then a hard stop, then the object's removal.
func (w *podWorker) terminate(ctx context.Context, srv *pod.Server) {
	p, _ := w.latest()
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if p.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	}
	w.log()("terminating", "grace", grace)
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	srv.Stop(gctx)
	w.ready = false
	w.waiting = "Terminated"
	w.writeStatus(ctx)
	// As the kubelet tears the sandbox down before it removes the object,
	// the address is free once the pod is gone from the API.
	w.releaseIP()
	w.k.finish(ctx, p)
}

// releaseIP returns the pod's address to the pool; later calls do nothing.
func (w *podWorker) releaseIP() {
	if w.ip.IsValid() && !w.released {
		w.k.cfg.PodIPs.Release(w.ip)
		w.released = true
	}
}

// writeStatus reports the worker's state as the pod's status.
func (w *podWorker) writeStatus(ctx context.Context) {
	p, vanished := w.latest()
	if vanished || ctx.Err() != nil {
		return
	}
	p = p.DeepCopy()
	w.reported = w.isReady()
	p.Status = w.status(p)
	if _, err := w.k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
		w.k.cfg.Logger.Debug("kubelet: status update", "pod", w.key, "err", err)
	}
}

func (w *podWorker) status(p *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: now}
		if ok {
			c.Status = corev1.ConditionTrue
		}
		for _, old := range p.Status.Conditions {
			if old.Type == t && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	running := w.waiting == "" && !w.started.IsZero()
	st := corev1.PodStatus{
		Phase:    corev1.PodPending,
		HostIP:   w.k.cfg.NodeIP.String(),
		HostIPs:  []corev1.HostIP{{IP: w.k.cfg.NodeIP.String()}},
		Message:  w.message,
		QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, true),
			cond(corev1.PodInitialized, true),
			cond(corev1.ContainersReady, w.reported),
			cond(corev1.PodReady, w.reported),
		},
	}
	if w.ip.IsValid() {
		st.PodIP = w.ip.String()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
		st.StartTime = &now
		if p.Status.StartTime != nil {
			st.StartTime = p.Status.StartTime
		}
	}
	c := p.Spec.Containers[0]
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: w.reported}
	switch {
	case running:
		st.Phase = corev1.PodRunning
		t := true
		cs.Started = &t
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: w.started}
	case w.waiting == "Terminated":
		st.Phase = corev1.PodRunning
		cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: w.started, FinishedAt: now}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.waiting, Message: w.message}
	}
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	return st
}
