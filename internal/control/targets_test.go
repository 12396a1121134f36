package control

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMetricsTargets(t *testing.T) {
	mk := func(name, ip string, args []string, ports ...corev1.ContainerPort) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app.kubernetes.io/name": "pricing"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pinlab", Args: args, Ports: ports}}},
			Status:     corev1.PodStatus{PodIP: ip},
		}
	}
	pods := []corev1.Pod{
		mk("named", "127.244.0.2", []string{"pod", "pricing"}, corev1.ContainerPort{Name: "grpc", ContainerPort: 8471}, corev1.ContainerPort{Name: "metrics", ContainerPort: 9471}),
		mk("flag", "127.244.0.3", []string{"pod", "pricing", "--metrics-port=9090"}),
		mk("none", "127.244.0.4", []string{"pod", "pricing"}),
		mk("no-ip", "", []string{"pod", "pricing", "--metrics-port=9090"}),
	}
	got := MetricsTargets(pods)
	want := []TargetGroup{
		{Targets: []string{"127.244.0.2:9471"}, Labels: map[string]string{"app_kubernetes_io_name": "pricing", "namespace": "shop", "pod": "named"}},
		{Targets: []string{"127.244.0.3:9090"}, Labels: map[string]string{"app_kubernetes_io_name": "pricing", "namespace": "shop", "pod": "flag"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var b strings.Builder
	if err := WriteScrapeConfig(&b, got[:1], "1s"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "scrape_interval: 1s") || !strings.Contains(b.String(), `- {"targets":["127.244.0.2:9471"]`) {
		t.Errorf("scrape config:\n%s", b.String())
	}
}
