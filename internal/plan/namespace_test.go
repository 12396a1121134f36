package plan

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestInNamespaces(t *testing.T) {
	target := Target{Namespace: "shop", Service: "pricing", Host: "pricing.shop.svc.cluster.local", Port: 8471}
	w := Workload{Kind: "Deployment", Namespace: "shop", Name: "pricing"}
	v := Variant{
		Objects: []runtime.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		},
		Groups:  []Group{{Name: "order", Target: target}},
		Clients: []Client{{Name: "order-0", Group: "order", Target: target}},
		Steps: []Step{
			{Action: Scale{Workload: w, Replicas: 3}},
			{Action: RolloutRestart{Workload: w}},
			{Action: Update{Workload: w, Image: "x"}},
			{Action: ConfigureClients{Clients: []Client{{Name: "order-0", Target: target}}}},
			{Action: PodAction{Verb: "kill", Pod: PodRef{Namespace: "shop", Workload: w, Pick: "oldest"}}},
			{Action: RestartClients{Names: []string{"order-0"}}},
		},
	}
	to := func(ns string) string { return "run1-" + ns }
	got := v.InNamespaces(to)

	for i, want := range []string{"run1-shop", "run1-shop", "run1-default"} {
		m := got.Objects[i].(metav1.ObjectMetaAccessor).GetObjectMeta()
		ns := m.GetNamespace()
		if i == 0 {
			ns = m.GetName()
		}
		if ns != want {
			t.Errorf("object %d: namespace %q, want %q", i, ns, want)
		}
	}
	wantTarget := Target{Namespace: "run1-shop", Service: "pricing", Host: "pricing.run1-shop.svc.cluster.local", Port: 8471}
	for _, tt := range []struct {
		name string
		got  Target
	}{
		{"group", got.Groups[0].Target},
		{"client", got.Clients[0].Target},
		{"configure step", got.Steps[3].Action.(ConfigureClients).Clients[0].Target},
	} {
		if !reflect.DeepEqual(tt.got, wantTarget) {
			t.Errorf("%s target: %+v, want %+v", tt.name, tt.got, wantTarget)
		}
	}
	for i, ns := range []string{
		got.Steps[0].Action.(Scale).Workload.Namespace,
		got.Steps[1].Action.(RolloutRestart).Workload.Namespace,
		got.Steps[2].Action.(Update).Workload.Namespace,
		got.Steps[4].Action.(PodAction).Pod.Namespace,
		got.Steps[4].Action.(PodAction).Pod.Workload.Namespace,
	} {
		if ns != "run1-shop" {
			t.Errorf("step namespace %d: %q, want run1-shop", i, ns)
		}
	}
	// v itself is unchanged.
	if v.Objects[1].(*appsv1.Deployment).Namespace != "shop" || !reflect.DeepEqual(v.Clients[0].Target, target) ||
		v.Steps[0].Action.(Scale).Workload.Namespace != "shop" {
		t.Error("InNamespaces changed its receiver")
	}
}
