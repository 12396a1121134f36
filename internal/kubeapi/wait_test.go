package kubeapi

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// workload is Deployment ns/name (app=name) as its controller reports it:
// generation 1 observed, want replicas, have pods of which ready are Ready.
func workload(ns, name string, want, have, ready int32) *appsv1.Deployment {
	d := deployment(ns, name, want)
	d.Generation = 1
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: have, ReadyReplicas: ready}
	return d
}

// pod is pod ns/name of app, created at created: Ready when waiting is
// nil, else its container waits as waiting says.
func pod(ns, name, app string, created time.Time, waiting *corev1.ContainerStateWaiting) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app},
		CreationTimestamp: metav1.NewTime(created)}}
	if waiting == nil {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return p
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: app, State: corev1.ContainerState{Waiting: waiting}}}
	return p
}

// TestWaitWorkloads: WaitWorkloads returns once every workload (of
// Namespaces) has its pods Ready, a skipped one a pod; else, when ctx
// ends, a NotReadyError naming the workload, its count of Ready pods and
// why its first unready pod is not, and at once when Permanent says that
// pod never will be.
func TestWaitWorkloads(t *testing.T) {
	now := time.Now()
	pull := &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: `image "nginx:1.27" not found`}
	backOff := &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "nginx:1.27"`}
	labNode := func(_ *corev1.Pod, reason string) bool { return reason == "ErrImagePull" }
	// realNode gives up on an image pull after a minute, as a remote
	// cluster's policy might.
	realNode := func(p *corev1.Pod, reason string) bool {
		return (reason == "ErrImagePull" || reason == "ImagePullBackOff") && time.Since(p.CreationTimestamp.Time) > time.Minute
	}
	unobserved := workload("shop", "web", 2, 2, 2)
	unobserved.Generation = 2
	unscheduled := pod("shop", "web-b", "web", now, nil)
	unscheduled.Status = corev1.PodStatus{Message: "0/1 nodes are available"}
	sts := statefulSet("shop", "db", 1)
	sts.Generation = 1
	sts.Status.ObservedGeneration = 1
	tests := []struct {
		name       string
		objs       []runtime.Object
		permanent  func(*corev1.Pod, string) bool
		namespaces []string
		skip       []WorkloadRef
		want       *NotReadyError // nil: WaitWorkloads returns nil
	}{
		{name: "all ready",
			objs: []runtime.Object{workload("shop", "web", 2, 2, 2), pod("shop", "web-a", "web", now, nil), pod("shop", "web-b", "web", now, nil)}},
		{name: "short: the first unready pod's waiting reason",
			objs:      []runtime.Object{workload("shop", "web", 2, 2, 1), pod("shop", "web-a", "web", now, nil), pod("shop", "web-b", "web", now, backOff)},
			permanent: labNode,
			want:      &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Ready: 1, Want: 2, Pod: "pod web-b: ImagePullBackOff: " + backOff.Message}},
		{name: "a permanent reason: at once",
			objs:      []runtime.Object{workload("shop", "web", 1, 1, 0), pod("shop", "web-b", "web", now, pull)},
			permanent: labNode,
			want:      &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Want: 1, Pod: "pod web-b: ErrImagePull: " + pull.Message, Permanent: true}},
		{name: "no policy: no reason is permanent",
			objs: []runtime.Object{workload("shop", "web", 1, 1, 0), pod("shop", "web-b", "web", now, pull)},
			want: &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Want: 1, Pod: "pod web-b: ErrImagePull: " + pull.Message}},
		{name: "a policy with a bound: not yet",
			objs:      []runtime.Object{workload("shop", "web", 1, 1, 0), pod("shop", "web-b", "web", now, backOff)},
			permanent: realNode,
			want:      &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Want: 1, Pod: "pod web-b: ImagePullBackOff: " + backOff.Message}},
		{name: "a policy with a bound: past it",
			objs:      []runtime.Object{workload("shop", "web", 1, 1, 0), pod("shop", "web-b", "web", now.Add(-2*time.Minute), backOff)},
			permanent: realNode,
			want:      &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Want: 1, Pod: "pod web-b: ImagePullBackOff: " + backOff.Message, Permanent: true}},
		{name: "the pod's status message",
			objs: []runtime.Object{workload("shop", "web", 1, 1, 0), unscheduled},
			want: &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Want: 1, Pod: "pod web-b: 0/1 nodes are available"}},
		{name: "a generation not yet observed",
			objs: []runtime.Object{unobserved},
			want: &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Ready: 2, Want: 2}},
		{name: "a StatefulSet",
			objs: []runtime.Object{sts},
			want: &NotReadyError{Workload: WorkloadRef{"StatefulSet", "shop", "db"}, Want: 1}},
		{name: "skipped: a pod is enough",
			objs: []runtime.Object{workload("shop", "web", 1, 1, 0), pod("shop", "web-b", "web", now, backOff)},
			skip: []WorkloadRef{{"Deployment", "shop", "web"}}},
		{name: "skipped: no pod yet",
			objs: []runtime.Object{workload("shop", "web", 1, 0, 0)},
			skip: []WorkloadRef{{"Deployment", "shop", "web"}},
			want: &NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, NoPod: true}},
		{name: "Namespaces: its own are waited on",
			objs:       []runtime.Object{workload("shop", "web", 1, 1, 1), workload("other", "web", 1, 0, 0), sts},
			namespaces: []string{"shop", "data"},
			want:       &NotReadyError{Workload: WorkloadRef{"StatefulSet", "shop", "db"}, Want: 1}},
		{name: "Namespaces: others' are not",
			objs:       []runtime.Object{workload("shop", "web", 1, 1, 1), workload("other", "web", 1, 0, 0)},
			namespaces: []string{"shop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := labtest.NewAPI(t, tt.objs...)
			k := Client{Clientset: api.Client, Factory: api.Factory, Permanent: tt.permanent, Namespaces: tt.namespaces}
			k.AddInformers()
			api.Start()
			const timeout = 300 * time.Millisecond
			ctx := labtest.Context(t, timeout)
			start := time.Now()
			err := k.WaitWorkloads(ctx, tt.skip)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("WaitWorkloads: %v", err)
				}
				return
			}
			var got *NotReadyError
			if !errors.As(err, &got) {
				t.Fatalf("WaitWorkloads: %v; want a NotReadyError", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("NotReadyError (-want +got):\n%s", diff)
			}
			// A permanent reason returns before ctx ends; any other waits
			// for ctx (its end, not a clock reading, says which).
			if early := ctx.Err() == nil; early != tt.want.Permanent {
				t.Errorf("returned after %v with ctx %v; want it at once only for a permanent reason", time.Since(start), ctx.Err())
			}
		})
	}
}

// TestNotReadyError: the messages callers prefix and show.
func TestNotReadyError(t *testing.T) {
	tests := []struct {
		name string
		err  NotReadyError
		want string
	}{
		{name: "why a pod waits", err: NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, Ready: 1, Want: 2, Pod: "pod web-b: ErrImagePull: gone"},
			want: "Deployment shop/web: 1 of 2 pods ready (pod web-b: ErrImagePull: gone)"},
		{name: "no pod says", err: NotReadyError{Workload: WorkloadRef{"StatefulSet", "shop", "db"}, Want: 1},
			want: "StatefulSet shop/db: 0 of 1 pods ready"},
		{name: "no pod yet", err: NotReadyError{Workload: WorkloadRef{"Deployment", "shop", "web"}, NoPod: true},
			want: "Deployment shop/web: no pod created yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}
