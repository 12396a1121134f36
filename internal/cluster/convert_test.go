package cluster

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// copyFieldByMaps and specChangedByMaps are the conversions copyField and
// specChanged replaced: both objects to unstructured, the field swapped or
// compared as maps.
func copyFieldByMaps(dst, src runtime.Object, field string) error {
	du, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dst)
	if err != nil {
		return err
	}
	su, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
	if err != nil {
		return err
	}
	if v, ok := su[field]; ok {
		du[field] = v
	} else {
		delete(du, field)
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(du, dst)
}

func specChangedByMaps(a, b runtime.Object) bool {
	au, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(a)
	bu, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	return !equality.Semantic.DeepEqual(au["spec"], bu["spec"])
}

// TestConversionsMatchMaps: copyField and specChanged give what the
// conversion of whole objects gave, timestamps cut to seconds included.
func TestConversionsMatchMaps(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 678, time.UTC))
	ready := true
	pod := func(image string, cond corev1.ConditionStatus) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", CreationTimestamp: at, DeletionTimestamp: &at},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000m")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.244.0.1", StartTime: &at,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: at}}},
		}
		return p
	}
	slice := func(ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", CreationTimestamp: at},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	}
	deploy := func(replicas int32, ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", CreationTimestamp: at},
			Spec:   appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{Spec: pod("v1", "").Spec}},
			Status: appsv1.DeploymentStatus{ReadyReplicas: ready, Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, LastUpdateTime: at}}}}
	}
	tests := []struct {
		name     string
		dst, src runtime.Object
	}{
		{name: "pod status", dst: pod("v1", corev1.ConditionFalse), src: pod("v2", corev1.ConditionTrue)},
		{name: "pod without status", dst: pod("v1", corev1.ConditionFalse), src: &corev1.Pod{Spec: pod("v1", "").Spec}},
		{name: "same pod", dst: pod("v1", corev1.ConditionTrue), src: pod("v1", corev1.ConditionTrue)},
		{name: "endpointslice (no status, no spec)", dst: slice("127.244.0.1"), src: slice("127.244.0.2")},
		{name: "deployment", dst: deploy(1, 0), src: deploy(3, 1)},
		{name: "service", dst: &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "127.96.0.1"}},
			src: &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "None"}, Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: "x", LastTransitionTime: at}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, got := tt.dst.DeepCopyObject(), tt.dst.DeepCopyObject()
			if err := copyFieldByMaps(want, tt.src, "status"); err != nil {
				t.Fatal(err)
			}
			if err := copyField(got, tt.src, "status"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("copyField (-maps +got):\n%s", diff)
			}
			if changed, err := specChanged(tt.dst, tt.src); err != nil || changed != specChangedByMaps(tt.dst, tt.src) {
				t.Errorf("specChanged = %v, %v; maps say %v", changed, err, specChangedByMaps(tt.dst, tt.src))
			}
		})
	}
}
