package scenario

import (
	"fmt"
	"strings"

	"github.com/pinlab/pinlab/internal/workload"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// servers applies a variant's server overlays (at path.servers) to copies
// of the workloads they name and returns the objects and a description of
// the overlays.
func (pl *planner) servers(path string, overlays []ServerOverlay, objs objects) (objects, string, error) {
	if len(overlays) == 0 {
		return objs, "", nil
	}
	objs = objs.copy()
	var desc []string
	for j, o := range overlays {
		s := at(pl.doc, fmt.Sprintf("%s.servers[%d]", path, j))
		w, err := objs.workloadRef(WorkloadRef{Deployment: o.Deployment, StatefulSet: o.StatefulSet, Namespace: o.Namespace})
		if err != nil {
			return nil, "", s.Errorf(refField(o.StatefulSet), "%v", err)
		}
		if err := checkServerOverlay(s, o, w); err != nil {
			return nil, "", err
		}
		applyServer(o, objs.find(w))
		desc = append(desc, describeServer(o, w)...)
	}
	return objs, strings.Join(desc, ", "), nil
}

func checkServerOverlay(s site, o ServerOverlay, w owner) error {
	if a := o.MaxConnectionAge; a != nil {
		if err := workload.CheckConnectionAge(a.Duration, 0); err != nil {
			return s.Errorf("maxConnectionAge", "%v", err)
		}
	}
	if g := o.MaxConnectionAgeGrace; g != nil {
		if err := workload.CheckConnectionAge(0, g.Duration); err != nil {
			return s.Errorf("maxConnectionAgeGrace", "%v", err)
		}
	}
	if m := o.MinReadySeconds; m != nil && (*m < 0 || *m > 3600) {
		return s.Errorf("minReadySeconds", "%d: expected 0 to 3600", *m)
	}
	if ps := o.PreStopSleepSeconds; ps != nil {
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if g := w.Template.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		if *ps < 0 || *ps > grace {
			return s.Errorf("preStopSleepSeconds", "%d: expected 0 to the pods' terminationGracePeriodSeconds (%d), as the API server requires", *ps, grace)
		}
	}
	return nil
}

// applyServer rewrites the workload's spec and its pinlab containers' args
// and preStop hook as o says.
func applyServer(o ServerOverlay, obj *Object) {
	w, _ := asWorkload(obj.Obj)
	if o.MinReadySeconds != nil {
		switch x := obj.Obj.(type) {
		case *appsv1.Deployment:
			x.Spec.MinReadySeconds = *o.MinReadySeconds
		case *appsv1.StatefulSet:
			x.Spec.MinReadySeconds = *o.MinReadySeconds
		}
	}
	for i := range w.Template.Spec.Containers {
		c := &w.Template.Spec.Containers[i]
		if !workload.IsPinlabImage(c.Image) {
			continue
		}
		if o.MaxConnectionAge != nil {
			c.Args = setFlag(c.Args, "--max-connection-age", o.MaxConnectionAge.Duration.String())
		}
		if o.MaxConnectionAgeGrace != nil {
			c.Args = setFlag(c.Args, "--max-connection-age-grace", o.MaxConnectionAgeGrace.Duration.String())
		}
		if o.PreStopSleepSeconds != nil {
			if c.Lifecycle == nil {
				c.Lifecycle = &corev1.Lifecycle{}
			}
			c.Lifecycle.PreStop = &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: *o.PreStopSleepSeconds}}
		}
	}
}

func describeServer(o ServerOverlay, w owner) []string {
	var desc []string
	if o.MaxConnectionAge != nil {
		desc = append(desc, fmt.Sprintf("%s: MaxConnectionAge %v", w.Name, o.MaxConnectionAge.Duration))
	}
	if o.MaxConnectionAgeGrace != nil {
		desc = append(desc, fmt.Sprintf("grace %v", o.MaxConnectionAgeGrace.Duration))
	}
	if o.MinReadySeconds != nil {
		desc = append(desc, fmt.Sprintf("%s: minReadySeconds %d", w.Name, *o.MinReadySeconds))
	}
	if o.PreStopSleepSeconds != nil {
		desc = append(desc, fmt.Sprintf("%s: preStop sleep %ds", w.Name, *o.PreStopSleepSeconds))
	}
	return desc
}

// setFlag replaces every "--name=v" or "--name v" in args with "--name=value".
func setFlag(args []string, name, value string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == name:
			i++ // drop the separate value too
		case strings.HasPrefix(args[i], name+"="):
		default:
			out = append(out, args[i])
		}
	}
	return append(out, name+"="+value)
}

// copy returns the set with deep copies of its objects.
func (objs objects) copy() objects {
	out := make(objects, len(objs))
	for i, o := range objs {
		out[i] = o
		out[i].Obj = o.Obj.DeepCopyObject()
	}
	return out
}

// find returns the object of workload w in the set.
func (objs objects) find(w owner) *Object {
	for i := range objs {
		if v, ok := asWorkload(objs[i].Obj); ok && v.Kind == w.Kind && v.Name == w.Name && v.Namespace == w.Namespace {
			return &objs[i]
		}
	}
	return nil
}
