package plan

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InNamespaces returns a copy of v whose namespaces are renamed by to: the
// objects' (a Namespace object's name, every other object's namespace;
// "" is "default"), the clients' targets (namespace and DNS name), and
// the timeline's workloads and pods. A remote cluster runs each variant
// in a namespace of its own this way. to may map several namespaces to
// one only when their objects' names do not meet there. v is not
// changed.
func (v Variant) InNamespaces(to func(string) string) Variant {
	out := v
	out.Objects = v.CopyObjects()
	for _, o := range out.Objects {
		m, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		if _, ok := o.(*corev1.Namespace); ok {
			m.SetName(to(m.GetName()))
			continue
		}
		m.SetNamespace(to(namespaceOf(m)))
	}
	out.Groups = make([]Group, len(v.Groups))
	for i, g := range v.Groups {
		g.Target = g.Target.inNamespace(to)
		out.Groups[i] = g
	}
	out.Clients = clientsIn(v.Clients, to)
	out.Steps = make([]Step, len(v.Steps))
	for i, st := range v.Steps {
		st.Action = actionIn(st.Action, to)
		out.Steps[i] = st
	}
	return out
}

func namespaceOf(m metav1.Object) string {
	if m.GetNamespace() == "" {
		return metav1.NamespaceDefault
	}
	return m.GetNamespace()
}

func clientsIn(cs []Client, to func(string) string) []Client {
	out := make([]Client, len(cs))
	for i, c := range cs {
		c.Target = c.Target.inNamespace(to)
		out[i] = c
	}
	return out
}

// inNamespace renames t's namespace, in Namespace and in Host (the
// Service's DNS name "<service>.<namespace>.svc..."). A URI is kept.
func (t Target) inNamespace(to func(string) string) Target {
	old := t.Namespace
	t.Namespace = to(old)
	if prefix := t.Service + "." + old + "."; strings.HasPrefix(t.Host, prefix) {
		t.Host = t.Service + "." + t.Namespace + "." + strings.TrimPrefix(t.Host, prefix)
	}
	return t
}

func (w Workload) inNamespace(to func(string) string) Workload {
	w.Namespace = to(w.Namespace)
	return w
}

// actionIn is a with its namespaces renamed.
func actionIn(a Action, to func(string) string) Action {
	switch a := a.(type) {
	case Scale:
		a.Workload = a.Workload.inNamespace(to)
		return a
	case RolloutRestart:
		a.Workload = a.Workload.inNamespace(to)
		return a
	case Update:
		a.Workload = a.Workload.inNamespace(to)
		return a
	case ConfigureClients:
		a.Clients = clientsIn(a.Clients, to)
		return a
	case PodAction:
		if a.Pod.Namespace != "" {
			a.Pod.Namespace = to(a.Pod.Namespace)
		}
		if a.Pod.Workload.Kind != "" {
			a.Pod.Workload = a.Pod.Workload.inNamespace(to)
		}
		return a
	}
	return a // RestartClients: names only
}
