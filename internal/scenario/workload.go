package scenario

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pinlab/pinlab/internal/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Workload kinds a scenario can name.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
)

// owner is an object that owns pods, a workload resource in Kubernetes'
// terms: a Deployment or a StatefulSet.
type owner struct {
	Kind, Name, Namespace string
	Replicas              int32 // spec.replicas, defaulted to 1
	Template              *corev1.PodTemplateSpec
}

// asWorkload views obj as an owner of pods; ok is false for other kinds.
func asWorkload(obj runtime.Object) (w owner, ok bool) {
	replicas := func(r *int32) int32 {
		if r == nil {
			return 1
		}
		return *r
	}
	ns := func(n string) string {
		if n == "" {
			return metav1.NamespaceDefault
		}
		return n
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return owner{KindDeployment, o.Name, ns(o.Namespace), replicas(o.Spec.Replicas), &o.Spec.Template}, true
	case *appsv1.StatefulSet:
		return owner{KindStatefulSet, o.Name, ns(o.Namespace), replicas(o.Spec.Replicas), &o.Spec.Template}, true
	}
	return owner{}, false
}

func (w owner) String() string { return fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name) }

// ref returns the plan's reference to w.
func (w owner) ref() plan.Workload {
	return plan.Workload{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, PodLabels: w.Template.Labels}
}

// workloads returns the set's workloads.
func (objs objects) workloads() []owner {
	var out []owner
	for _, o := range objs {
		if w, ok := asWorkload(o.Obj); ok {
			out = append(out, w)
		}
	}
	return out
}

// workload finds a workload by kind, name and namespace (empty: unique
// across namespaces).
func (objs objects) workload(kind, ns, name string) (owner, error) {
	var found []owner
	var all []string
	for _, w := range objs.workloads() {
		if w.Kind != kind {
			continue
		}
		all = append(all, w.Namespace+"/"+w.Name)
		if w.Name == name && (ns == "" || ns == w.Namespace) {
			found = append(found, w)
		}
	}
	switch {
	case name == "":
		return owner{}, errors.New("required")
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return owner{}, fmt.Errorf("a %s %q exists in several namespaces; set namespace", kind, name)
	}
	return owner{}, fmt.Errorf("no %s %q in this file (%ss: %s)", kind, name, kind, listOrNone(all))
}

// workloadRef finds the workload r names.
func (objs objects) workloadRef(r WorkloadRef) (owner, error) {
	kind, name, err := ref(r.Deployment, r.StatefulSet)
	if err != nil {
		return owner{}, err
	}
	return objs.workload(kind, r.Namespace, name)
}

// ref names a workload in a timeline step or overlay: exactly one of the
// kind fields is set.
func ref(deployment, statefulSet string) (kind, name string, err error) {
	switch {
	case deployment != "" && statefulSet == "":
		return KindDeployment, deployment, nil
	case statefulSet != "" && deployment == "":
		return KindStatefulSet, statefulSet, nil
	}
	return "", "", errors.New("expected exactly one of deployment or statefulSet")
}

// refField is the field of a workload reference that names it.
func refField(statefulSet string) string {
	if statefulSet != "" {
		return "statefulSet"
	}
	return "deployment"
}

// podMayExist reports whether name is the name a StatefulSet of the set
// gives one of its pods (set-N), in namespace ns if set; it returns that
// StatefulSet's namespace.
func (objs objects) podMayExist(name, ns string) (string, bool) {
	for _, w := range objs.workloads() {
		if w.Kind != KindStatefulSet || ns != "" && ns != w.Namespace {
			continue
		}
		if n, ok := strings.CutPrefix(name, w.Name+"-"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return w.Namespace, true
		}
	}
	return "", false
}

// peakPods returns the most pods a variant runs at once: every workload at
// its largest replica count over the timeline (scale-downs are not
// subtracted, since terminating pods still run).
func peakPods(objs objects, steps []plan.Step) int {
	total := 0
	for _, r := range peaks(objs, steps) {
		total += int(r)
	}
	return total
}

// peaks returns each workload's largest replica count over the timeline,
// by workload.String().
func peaks(objs objects, steps []plan.Step) map[string]int32 {
	peak := map[string]int32{}
	for _, w := range objs.workloads() {
		peak[w.String()] = w.Replicas
	}
	for _, st := range steps {
		if s, ok := st.Action.(plan.Scale); ok {
			peak[s.Workload.String()] = max(peak[s.Workload.String()], s.Replicas)
		}
	}
	return peak
}

// setTargetPods fills each group's and client's Target.PeakPods: the most
// pods its Service selects over the timeline.
func setTargetPods(objs objects, steps []plan.Step, groups []plan.Group, clients []plan.Client) {
	peak := peaks(objs, steps)
	count := func(t *plan.Target) {
		t.PeakPods = 0
		if s := objs.service(t.Namespace, t.Service); s != nil {
			for _, w := range objs.backends(t.Namespace, s) {
				t.PeakPods += int(peak[w.String()])
			}
		}
	}
	for i := range groups {
		count(&groups[i].Target)
	}
	for i := range clients {
		count(&clients[i].Target)
	}
}
