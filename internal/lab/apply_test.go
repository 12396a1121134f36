package lab

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestApplyAsKubectl: a lab takes what kubectl apply takes against a real
// API server (issue 15; the order and merge rules are kubeapi's, tested
// there): hand-written EndpointSlices before their Service, with none, or
// beside the controller's slices of a Service with a selector, which
// WaitReady then waits on; and a manifest's kube-dns Service, on the port
// the lab's DNS serves, merges with the lab's own and keeps its ClusterIP.
func TestApplyAsKubectl(t *testing.T) {
	slice := func(name, svc, addr string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: new(int32(8471))}},
		}
	}
	legacy := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471}}}}
	objs := append([]runtime.Object{
		slice("legacy-1", "legacy", "127.0.0.77"),  // before its Service
		slice("orphan-1", "nothing", "127.0.0.78"), // no Service at all
		slice("extra-1", "pricing", "127.0.0.79"),  // beside the controller's slices
		legacy,
	}, pricing(2)...)
	l := startLab(t, Config{}, objs)

	ctx := context.Background()
	// The kube-dns Service as a manifest names it, on the port the lab's
	// DNS serves (53, or another without root), with a metrics port more.
	dns, err := l.Cluster.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := dns.Spec.Ports[0].Port
	mine := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"team": "platform"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "dns", Port: port, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: port, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP}}}}
	if err := l.Apply(ctx, []runtime.Object{mine}); err != nil {
		t.Fatalf("applying kube-dns: %v", err)
	}
	dns, err = l.Cluster.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || len(dns.Spec.Ports) != 3 || dns.Labels["team"] != "platform" || dns.Labels["k8s-app"] != "kube-dns" || dns.Spec.ClusterIP != l.Cluster.DNSIP().String() {
		t.Errorf("kube-dns after the merge: %v, %v, %v, %s; want 3 ports, both labels, ClusterIP %v", err, dns.Spec.Ports, dns.Labels, dns.Spec.ClusterIP, l.Cluster.DNSIP())
	}
}
