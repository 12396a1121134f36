package lab

import (
	"context"
	"fmt"
	"github.com/pinlab/pinlab/internal/load/loadtest"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// webPricing is Deployment pricing with n replicas whose pods serve gRPC
// on 8471 and HTTP on their containerPort named http (8080), and
// ClusterIP Service pricing with both ports.
func webPricing(n int32) []runtime.Object {
	lbl := map[string]string{"app": "pricing"}
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "web"}, Spec: corev1.ServiceSpec{Selector: lbl, Ports: []corev1.ServicePort{
			{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")},
			{Name: "http", Port: 8080, TargetPort: intstr.FromString("http")},
		}}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "web"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pricing", Image: "pinlab", Args: []string{"pod", "pricing"},
						Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}, {Name: "http", ContainerPort: 8080}}}}}},
			},
		},
	}
}

// TestWebPodsBehindAService: a Service with a gRPC and an HTTP port gets
// both in its EndpointSlices, and kube-proxy serves the HTTP port's VIP:
// HTTP/1.1 connections through it reach every pod, a WebSocket one.
func TestWebPodsBehindAService(t *testing.T) {
	l := startLab(t, Config{}, webPricing(3))
	slices, err := l.Cluster.Client().DiscoveryV1().EndpointSlices("web").List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=pricing"})
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	endpoints := 0
	for _, es := range slices.Items {
		for _, p := range es.Ports {
			ports = append(ports, fmt.Sprintf("%s/%d", *p.Name, *p.Port))
		}
		endpoints += len(es.Endpoints)
	}
	sort.Strings(ports)
	if diff := cmp.Diff([]string{"grpc/8471", "http/8080"}, ports); diff != "" || endpoints != 3 {
		t.Fatalf("slices list %d endpoints with ports (-want +got):\n%s", endpoints, diff)
	}

	url := "http://pricing.web.svc.cluster.local.:8080"
	source := func() netip.Addr {
		ip, err := l.Cluster.PodIPs().Allocate()
		if err != nil {
			t.Fatal(err)
		}
		return ip
	}
	t.Run("HTTP/1.1 without keep-alive spreads over the pods", func(t *testing.T) {
		var obs loadtest.Tally
		c, err := load.NewHTTPClient(load.HTTPConfig{Name: "order-0", Source: source(), URL: url, DNS: l.DNSAddr(), Rate: 100,
			DisableKeepAlives: true, Observer: &obs})
		if err != nil {
			t.Fatal(err)
		}
		labtest.RunFor(c.Run, time.Second)
		if obs.Codes["OK"] < 50 || len(obs.Codes) != 1 {
			t.Fatalf("codes %v: want only OK and at least 50 requests", obs.Codes)
		}
		if len(obs.Pods) != 3 {
			t.Errorf("requests by pod %v: want all 3 pods over new connections", obs.Pods)
		}
	})
	t.Run("WebSocket pins to one pod", func(t *testing.T) {
		var obs loadtest.Tally
		c, err := load.NewWSClient(load.WSConfig{Name: "order-1", Source: source(), URL: url, DNS: l.DNSAddr(), Rate: 100, Observer: &obs})
		if err != nil {
			t.Fatal(err)
		}
		labtest.RunFor(c.Run, time.Second)
		if obs.Codes["OK"] < 50 || len(obs.Codes) != 1 {
			t.Fatalf("codes %v: want only OK and at least 50 messages", obs.Codes)
		}
		if len(obs.Pods) != 1 {
			t.Errorf("messages by pod %v: want one pod", obs.Pods)
		}
	})
}
