package scenario

import (
	"errors"
	"fmt"

	"github.com/pinlab/pinlab/internal/manifest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Workload kinds a scenario can name.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
)

// workload is an object that owns pods: a Deployment or a StatefulSet.
type workload struct {
	Kind, Name, Namespace string
	Replicas              int32 // spec.replicas, defaulted to 1
	Template              *corev1.PodTemplateSpec
}

// asWorkload views obj as a workload; ok is false for other kinds.
func asWorkload(obj runtime.Object) (w workload, ok bool) {
	replicas := func(r *int32) int32 {
		if r == nil {
			return 1
		}
		return *r
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return workload{KindDeployment, o.Name, namespaceOfObj(o.Namespace), replicas(o.Spec.Replicas), &o.Spec.Template}, true
	case *appsv1.StatefulSet:
		return workload{KindStatefulSet, o.Name, namespaceOfObj(o.Namespace), replicas(o.Spec.Replicas), &o.Spec.Template}, true
	}
	return workload{}, false
}

func (w workload) String() string { return fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name) }

// workloads returns the file's workloads with the documents they came from.
func (f *File) workloads() []workload {
	var out []workload
	for _, o := range f.Objects {
		if w, ok := asWorkload(o.Obj); ok {
			out = append(out, w)
		}
	}
	return out
}

// workload finds a workload by kind, name and namespace (empty: unique
// across namespaces).
func (f *File) workload(kind, ns, name string) (workload, error) {
	var found []workload
	var all []string
	for _, w := range f.workloads() {
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
		return workload{}, errors.New("required")
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return workload{}, fmt.Errorf("a %s %q exists in several namespaces; set namespace", kind, name)
	}
	return workload{}, fmt.Errorf("no %s %q in this file (%ss: %s)", kind, name, kind, listOrNone(all))
}

// workloadDoc returns the document of a workload.
func (f *File) workloadDoc(w workload) manifest.Document {
	for _, o := range f.Objects {
		if v, ok := asWorkload(o.Obj); ok && v.Kind == w.Kind && v.Name == w.Name && v.Namespace == w.Namespace {
			return o.Doc
		}
	}
	return manifest.Document{}
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
