package kubelet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestQOSClass: the class the API server computes (GetPodQOS), or the one
// it already set, which is immutable.
func TestQOSClass(t *testing.T) {
	rl := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	for _, tt := range []struct {
		name string
		res  corev1.ResourceRequirements
		set  corev1.PodQOSClass
		want corev1.PodQOSClass
	}{
		{"none", corev1.ResourceRequirements{}, "", corev1.PodQOSBestEffort},
		{"requests", corev1.ResourceRequirements{Requests: rl("cpu", "100m")}, "", corev1.PodQOSBurstable},
		{"requests below limits", corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("cpu", "1", "memory", "256Mi")}, "", corev1.PodQOSBurstable},
		{"limits only", corev1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "256Mi")}, "", corev1.PodQOSGuaranteed},
		{"requests equal limits", corev1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "256Mi"), Limits: rl("cpu", "1", "memory", "256Mi")}, "", corev1.PodQOSGuaranteed},
		{"cpu limit only", corev1.ResourceRequirements{Limits: rl("cpu", "1")}, "", corev1.PodQOSBurstable},
		{"set by the API server", corev1.ResourceRequirements{}, corev1.PodQOSBurstable, corev1.PodQOSBurstable},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: tt.res}}}, Status: corev1.PodStatus{QOSClass: tt.set}}
		if got := qosClass(p); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
