package kubelet

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/pinlab/pinlab/internal/agent"
	"github.com/pinlab/pinlab/internal/podlog"
)

// IsAgentImage reports whether image is pinlab-agent's: its repository's
// last path element is "pinlab-agent", whatever the registry, tag or
// digest ("registry.example/tools/pinlab-agent:v1",
// "pinlab-agent@sha256:..."). It is the only image the lab's node runs as
// an ephemeral container, and it runs it in-process (package agent), in
// the pod's network namespace, as the image's binary would.
func IsAgentImage(image string) bool {
	ref, err := name.ParseReference(image)
	return err == nil && path.Base(ref.Context().RepositoryStr()) == "pinlab-agent"
}

// ephemeral is one ephemeral container of a pod: an agent run, or why it
// does not run.
type ephemeral struct {
	name, image string
	started     time.Time
	out         *podlog.Log
	cancel      context.CancelFunc
	done        chan struct{} // closed when the run ended, err set
	err         error
	waiting     string // reason when it never started
	message     string
}

// syncEphemeral starts the agents among p's ephemeral containers that have
// not been seen yet (an ephemeral container is added once and never
// changes); the others wait with ErrImagePull. Worker goroutine only.
func (w *podWorker) syncEphemeral(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.eph == nil {
		w.eph = map[string]*ephemeral{}
	}
	for _, c := range p.Spec.EphemeralContainers {
		if w.eph[c.Name] != nil {
			continue
		}
		e := &ephemeral{name: c.Name, image: c.Image}
		w.eph[c.Name] = e
		if !IsAgentImage(c.Image) {
			e.waiting, e.message = "ErrImagePull", fmt.Sprintf("pinlab's node runs no container images but pinlab-agent's: ephemeral container %q (image %q) cannot start", c.Name, c.Image)
			continue
		}
		o, _, err := agent.ParseArgs(append(append([]string(nil), c.Command[min(1, len(c.Command)):]...), c.Args...))
		if err != nil {
			e.waiting, e.message = "CreateContainerError", err.Error()
			continue
		}
		if sb := w.sandbox; sb != nil {
			o.Do = sb.Do // the pod's own namespace: every connection there is the pod's
		} else {
			o.Local = w.ip // pods share the node's namespace: only this pod's address
		}
		ctx, cancel := context.WithCancel(context.Background())
		e.started, e.out, e.cancel, e.done = time.Now(), podlog.New(), cancel, make(chan struct{})
		w.ephWG.Add(1)
		go func() {
			defer w.ephWG.Done()
			err := agent.Run(ctx, lineWriter{e.out}, o)
			e.out.Close()
			w.mu.Lock()
			e.err = err
			w.mu.Unlock()
			close(e.done)
			w.notify() // its status changes
		}()
	}
}

// stopEphemeral ends every agent of the pod and waits for them.
func (w *podWorker) stopEphemeral() {
	w.mu.Lock()
	for _, e := range w.eph {
		if e.cancel != nil {
			e.cancel()
		}
	}
	w.mu.Unlock()
	w.ephWG.Wait()
}

// ephemeralStatuses reports p's ephemeral containers: an agent running or
// ended, another image waiting with ErrImagePull (the lab's node pulls no
// images), as the kubelet reports a container it cannot pull.
func (w *podWorker) ephemeralStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []corev1.ContainerStatus
	for _, c := range p.Spec.EphemeralContainers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		e := w.eph[c.Name]
		switch {
		case e == nil:
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		case e.waiting != "":
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: e.waiting, Message: e.message}
		case isClosed(e.done):
			t := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: metav1.NewTime(e.started)}
			if e.err != nil && !errors.Is(e.err, context.Canceled) {
				t.ExitCode, t.Reason, t.Message = 1, "Error", e.err.Error()
			}
			st.State.Terminated = t
		default:
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(e.started)}
			st.Started = new(bool)
			*st.Started = true
		}
		out = append(out, st)
	}
	return out
}

// ephemeralChanged reports whether p's status of its ephemeral containers
// is behind what the worker would report.
func (w *podWorker) ephemeralChanged(p *corev1.Pod) bool {
	now := w.ephemeralStatuses(p)
	if len(now) != len(p.Status.EphemeralContainerStatuses) {
		return true
	}
	for i, s := range now {
		old := p.Status.EphemeralContainerStatuses[i]
		if stateKind(s.State) != stateKind(old.State) || s.Name != old.Name {
			return true
		}
	}
	return false
}

func stateKind(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return "terminated"
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	}
	return ""
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// EphemeralLog returns the output of pod namespace/name's ephemeral
// container (an agent's JSON lines). Errors wrap ErrNoPod or ErrNoLog.
func (k *Kubelet) EphemeralLog(namespace, name, container string) (*podlog.Log, error) {
	w, err := k.worker(namespace, name)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.eph[container]
	if e == nil || e.out == nil {
		return nil, fmt.Errorf("%w: ephemeral container %q of pod %s has not started", ErrNoLog, container, w.key)
	}
	return e.out, nil
}

// lineWriter writes to a container's Log: each Write is one line or
// more (agent.Run writes whole lines).
type lineWriter struct{ l *podlog.Log }

func (lw lineWriter) Write(b []byte) (int, error) {
	lw.l.Printf("%s", b)
	return len(b), nil
}
