package clusterrun

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/remote"
	"github.com/pinlab/pinlab/internal/runner"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// TestPermissionsSuffice: everything the backend does to a cluster, on an
// API that forbids whatever Permissions do not name, succeeds: the
// permission check cannot pass a user whose run then fails half-way.
func TestPermissionsSuffice(t *testing.T) {
	cs := fake.NewClientset()
	var denied []string
	allowed := func(verb string, r schema.GroupVersionResource, sub string) bool {
		for _, p := range Permissions {
			if p.Verb == verb && p.Group == r.Group && p.Resource == r.Resource && p.Subresource == sub {
				return true
			}
		}
		denied = append(denied, verb+" "+r.Resource+"/"+sub+"."+r.Group)
		return false
	}
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if allowed(a.GetVerb(), a.GetResource(), a.GetSubresource()) {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", nil)
	})
	cs.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if allowed("watch", a.GetResource(), "") {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", nil)
	})
	// Keep and a short renewal: the lease is renewed, then released at
	// Close, and cluster clean's calls follow.
	b, err := remote.New(remote.Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, Clientset: cs, Run: "ab12cd34",
		Image: "registry.example/pinlab@sha256:00", Token: remote.NewToken(), LoadDuration: time.Minute,
		Keep: true, LeaseRenew: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ns := remote.Namespace("ab12cd34", 0)
	one := int32(1)
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "pinlab", Args: []string{"pod", "pricing"}}}}}
	objs := []runtime.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 8471}}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: ns}, Spec: appsv1.DeploymentSpec{Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}, Template: template}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, Spec: appsv1.StatefulSetSpec{Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}, Template: template}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := b.Start(ctx, runner.Setup{Variant: plan.Variant{Name: "v", Objects: objs}})
	if err != nil {
		t.Fatalf("Start: %v (denied %q)", err, denied)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"apply", func() error { return c.Apply(ctx, objs) }},
		{"scale Deployment", func() error { return c.Scale(ctx, "Deployment", ns, "d", 2) }},
		{"scale StatefulSet", func() error { return c.Scale(ctx, "StatefulSet", ns, "s", 2) }},
		{"update Deployment", func() error {
			return c.UpdateTemplate(ctx, "Deployment", ns, "d", func(t *corev1.PodTemplateSpec) { t.Spec.Containers[0].Args = []string{"pod", "pricing", "--port=1"} })
		}},
		{"rollout restart Deployment", func() error { return c.RolloutRestart(ctx, "Deployment", ns, "d") }},
		{"rollout restart StatefulSet", func() error { return c.RolloutRestart(ctx, "StatefulSet", ns, "s") }},
		{"delete pod", func() error {
			_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}}, metav1.CreateOptions{})
			if apierrors.IsForbidden(err) { // the test's own set-up, not the backend's
				err = cs.Tracker().Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}})
			}
			if err != nil {
				return err
			}
			return c.DeletePod(ctx, ns, "p", nil)
		}},
		{"renew the lease", func() error {
			return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, false, func(ctx context.Context) (bool, error) {
				return len(cs.Actions()) > 0 && slices.ContainsFunc(cs.Actions(), func(a k8stesting.Action) bool {
					return a.GetVerb() == "update" && a.GetResource().Resource == "leases"
				}), nil
			})
		}},
		{"close, releasing the lease", c.Close},
		{"find what is left, watching a lapsed lease", func() error {
			run, secs := "ef56ab78", int32(1)
			at := metav1.NewMicroTime(time.Now().Add(-2 * time.Second))
			other := remote.Namespace(run, 0)
			for _, o := range []runtime.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other, Labels: map[string]string{remote.RunLabel: run}}},
				&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: remote.LeaseName, Namespace: other, Labels: map[string]string{remote.RunLabel: run}},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &secs, RenewTime: &at}},
			} {
				if err := cs.Tracker().Add(o); err != nil {
					return err
				}
			}
			_, err := remote.Leftovers(ctx, cs, "", true)
			return err
		}},
		{"delete it", func() error { return remote.DeleteNamespaces(cs, []string{ns}, nil) }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
	}
	if len(denied) > 1 || len(denied) == 1 && denied[0] != "create pods/." {
		t.Errorf("the backend asked for what Permissions do not grant: %q", denied)
	}
}
