package scenario

import (
	"errors"
	"strings"

	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
)

// ProbeWarning is a probe of a pod template that can never succeed: it
// targets a port nothing in the pod listens on, or an HTTP path the pod's
// server does not answer (workload.CheckProbePort). Kubernetes accepts such
// a pod; a readiness or startup probe there keeps the pod from ever turning
// Ready, a liveness probe restarts its container forever.
type ProbeWarning struct {
	// Kind, Namespace and Name are the workload's: Deployment or
	// StatefulSet.
	Kind, Namespace, Name string
	// NeverReady reports a readiness or startup probe: the workload's pods
	// never turn Ready.
	NeverReady bool
	// Err describes the probe at its document and field.
	Err error
}

// ProbeWarnings lists the probes of f's pod templates that can never
// succeed, each at its field. pinlab lab up starts such pods, as the API
// server accepts them, and warns; a scenario (Load) refuses them, because
// a run waits for every pod to be Ready before load starts, and a
// container restarted forever by its liveness probe measures nothing but
// its restarts.
func (f *File) ProbeWarnings() []ProbeWarning {
	var out []ProbeWarning
	for _, o := range f.Objects {
		w, ok := asWorkload(o.Obj)
		if !ok {
			continue
		}
		for _, se := range probeErrors(&w.Template.Spec) {
			out = append(out, ProbeWarning{
				Kind: w.Kind, Namespace: w.Namespace, Name: w.Name,
				NeverReady: !strings.HasPrefix(se.Field, livenessField),
				Err:        o.Errorf("spec.template.spec."+se.Field, "%s", se.Msg),
			})
		}
	}
	return out
}

// checkProbes refuses, in a scenario, the first probe that can never
// succeed (see ProbeWarnings).
func (objs objects) checkProbes() error {
	for _, o := range objs {
		if w, ok := asWorkload(o.Obj); ok {
			if ses := probeErrors(&w.Template.Spec); len(ses) > 0 {
				return o.Errorf("spec.template.spec."+ses[0].Field, "%s; a run waits for every pod to be Ready and measures pods that keep serving, so fix the probe (pinlab lab up starts such pods, with a warning)", ses[0].Msg)
			}
		}
	}
	return nil
}

// The probe fields of the lab's one container, as workload.SpecError names
// them.
const (
	readinessField = "containers[0].readinessProbe"
	livenessField  = "containers[0].livenessProbe"
	startupField   = "containers[0].startupProbe"
)

// probeErrors returns one error per probe of a runnable pod spec that can
// never succeed, in the order workload.CheckProbePort checks them. A spec
// the kubelet cannot run has none (checkPodSpec reports it).
func probeErrors(spec *corev1.PodSpec) []*workload.SpecError {
	w, err := workload.For(spec)
	if err != nil {
		return nil
	}
	c := spec.Containers[0] // a copy: each probe found is taken out of it
	var out []*workload.SpecError
	for range 3 {
		var se *workload.SpecError
		if !errors.As(workload.CheckProbePort(&c, w.Port), &se) {
			break
		}
		out = append(out, se)
		switch {
		case strings.HasPrefix(se.Field, readinessField):
			c.ReadinessProbe = nil
		case strings.HasPrefix(se.Field, livenessField):
			c.LivenessProbe = nil
		case strings.HasPrefix(se.Field, startupField):
			c.StartupProbe = nil
		default:
			return out
		}
	}
	return out
}
