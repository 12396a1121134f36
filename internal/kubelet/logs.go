package kubelet

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pinlab/pinlab/internal/podlog"
)

// ErrNoLog is returned by Logs for a container run that has no log: the
// container has not started yet, or there is no run before the latest.
var ErrNoLog = errors.New("kubelet: no such container log")

// Logs returns the standard output of pod namespace/name's container, as
// the kubelet's containerLogs serves it: that of the running container or,
// when none runs, of the last one; with previous, that of the run before
// it (after a restart). The Log keeps growing while its container runs.
// Errors wrap ErrNoPod or ErrNoLog.
func (k *Kubelet) Logs(namespace, name string, previous bool) (*podlog.Log, error) {
	w, err := k.worker(namespace, name)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if previous {
		if w.outs[1] == nil {
			return nil, fmt.Errorf("%w: no previous terminated container in pod %s", ErrNoLog, w.key)
		}
		return w.outs[1], nil
	}
	if w.outs[0] == nil {
		return nil, fmt.Errorf("%w: the container in pod %s is waiting to start", ErrNoLog, w.key)
	}
	return w.outs[0], nil
}

// Pods returns the pods this kubelet runs (on a registered node, those
// bound to it), as it last saw them, ordered by namespace and name. The
// pods are shared: do not modify them.
func (k *Kubelet) Pods() []*corev1.Pod {
	k.mu.Lock()
	ws := make([]*podWorker, 0, len(k.workers))
	for _, w := range k.workers {
		ws = append(ws, w)
	}
	k.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(ws))
	for _, w := range ws {
		if p, vanished := w.latest(); !vanished {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// Pod returns the pod namespace/name if this kubelet runs it.
func (k *Kubelet) Pod(namespace, name string) (*corev1.Pod, bool) {
	w, err := k.worker(namespace, name)
	if err != nil {
		return nil, false
	}
	p, vanished := w.latest()
	return p, !vanished
}
