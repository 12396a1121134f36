package kubelet

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// killReason is why the kubelet stops a container.
type killReason int

const (
	killDeleted  killReason = iota // the pod is being deleted
	killLiveness                   // the liveness probe failed
	killStartup                    // the startup probe failed
)

// minimumGracePeriod is the kubelet's minimumGracePeriodInSeconds: however
// long a preStop hook ran, a container gets at least this long between
// SIGTERM and SIGKILL.
const minimumGracePeriod = 2 * time.Second

// gracePeriod returns the grace period in seconds for stopping p's
// container, as the kubelet's setTerminationGracePeriod: the pod's
// deletionGracePeriodSeconds if set, else a failed probe's own
// terminationGracePeriodSeconds (liveness and startup kills), else the pod's
// terminationGracePeriodSeconds, else 2.
func gracePeriod(p *corev1.Pod, reason killReason) int64 {
	switch {
	case p.DeletionGracePeriodSeconds != nil:
		return *p.DeletionGracePeriodSeconds
	case p.Spec.TerminationGracePeriodSeconds != nil:
		c := &p.Spec.Containers[0]
		if reason == killLiveness && c.LivenessProbe != nil && c.LivenessProbe.TerminationGracePeriodSeconds != nil {
			return *c.LivenessProbe.TerminationGracePeriodSeconds
		}
		if reason == killStartup && c.StartupProbe != nil && c.StartupProbe.TerminationGracePeriodSeconds != nil {
			return *c.StartupProbe.TerminationGracePeriodSeconds
		}
		return *p.Spec.TerminationGracePeriodSeconds
	}
	return int64(minimumGracePeriod / time.Second)
}

// stopTimeout is how long the runtime waits between SIGTERM and SIGKILL
// after a preStop hook that ran for hookRan, as killContainer computes it:
// the grace period less the hook's run time in whole seconds (the kubelet
// truncates), but at least minimumGracePeriod. A hook that overran the grace
// period therefore still leaves the container 2 s after SIGTERM.
func stopTimeout(grace int64, hookRan time.Duration) time.Duration {
	left := time.Duration(grace-int64(hookRan/time.Second)) * time.Second
	return max(left, minimumGracePeriod)
}
