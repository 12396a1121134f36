package kubelet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeStatus reports the worker's state as the pod's status.
func (w *podWorker) writeStatus(ctx context.Context) {
	p, vanished := w.latest()
	if vanished || ctx.Err() != nil {
		return
	}
	p = p.DeepCopy()
	w.reported = w.isReady()
	pods, uid := w.k.client.CoreV1().Pods(p.Namespace), p.UID
	// A real API server refuses a write based on a stale resourceVersion
	// (409), which the informer's copy can be right after this worker's own
	// last write; then write again on the object as it is now (the
	// embedded API never refuses).
	for try := 0; ; try++ {
		p.Status = w.status(p)
		_, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil || ctx.Err() != nil {
			return
		}
		if apierrors.IsConflict(err) && try < 5 {
			if p, err = pods.Get(ctx, p.Name, metav1.GetOptions{}); err == nil && p.UID == uid {
				continue
			}
		}
		w.k.cfg.Logger.Debug("kubelet: status update", "pod", w.key, "err", err)
		return
	}
}

// status builds the pod's status as the kubelet's generateAPIPodStatus
// would for one container: phase, conditions, IPs and the container's
// state, last state, restart count, started and ready flags.
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
	st := corev1.PodStatus{
		Phase:    w.phase(p),
		HostIP:   w.k.cfg.NodeIP.String(),
		HostIPs:  []corev1.HostIP{{IP: w.k.cfg.NodeIP.String()}},
		Message:  w.statusMessage(),
		QOSClass: qosClass(p),
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
	st.ContainerStatuses = []corev1.ContainerStatus{w.containerStatus(p)}
	st.EphemeralContainerStatuses = w.ephemeralStatuses(p)
	return st
}

func (w *podWorker) containerStatus(p *corev1.Pod) corev1.ContainerStatus {
	c := p.Spec.Containers[0]
	started := false
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: w.reported, RestartCount: w.restarts, Started: &started}
	if w.lastTerm != nil {
		cs.LastTerminationState.Terminated = w.lastTerm
	}
	w.mu.Lock()
	cur := w.cur
	w.mu.Unlock()
	switch {
	case cur != nil:
		started = cur.startedOK.Load()
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: cur.started}
	case w.term != nil && w.waiting == "":
		cs.State.Terminated = w.term
	default:
		if w.term != nil {
			cs.LastTerminationState.Terminated = w.term
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.waiting, Message: w.message}
	}
	return cs
}

// phase is the kubelet's getPhase for one container: Pending until it
// first runs; Running while it runs or will restart; once it will not run
// again, Succeeded or Failed by its exit code, except for a deleted pod
// (the lab keeps Running until the object goes).
func (w *podWorker) phase(p *corev1.Pod) corev1.PodPhase {
	w.mu.Lock()
	running := w.cur != nil
	w.mu.Unlock()
	switch {
	case running:
		return corev1.PodRunning
	case w.term == nil:
		return corev1.PodPending
	case !w.final || w.deleting:
		return corev1.PodRunning
	case w.term.ExitCode == 0:
		return corev1.PodSucceeded
	}
	return corev1.PodFailed
}

// statusMessage is why the container does not run, or its probes' latest
// failures.
func (w *podWorker) statusMessage() string {
	if w.message != "" {
		return w.message
	}
	msg := ""
	for _, m := range w.probeMsg {
		if m != "" {
			if msg != "" {
				msg += "; "
			}
			msg += m
		}
	}
	return msg
}

// qosClass is the pod's QoS class: the one the API server set when it
// created the pod (status.qosClass is immutable after), else the class of
// its containers' CPU and memory requests and limits as the API server's
// GetPodQOS computes it: BestEffort without any, Guaranteed when every
// container limits both and requests what it limits (a request left out
// is its limit), Burstable otherwise.
func qosClass(p *corev1.Pod) corev1.PodQOSClass {
	if p.Status.QOSClass != "" {
		return p.Status.QOSClass
	}
	some, guaranteed := false, true
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq && !req.IsZero() || hasLim && !lim.IsZero() {
				some = true
			}
			if !hasLim || lim.IsZero() || hasReq && req.Cmp(lim) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case !some:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}
