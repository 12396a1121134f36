package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClusterIPv4(t *testing.T) {
	tests := []struct {
		name   string
		svc    v1.Service
		want   string
		wantOK bool
	}{
		{"clusterIP", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "127.96.0.1", ClusterIPs: []string{"127.96.0.1"}}}, "127.96.0.1", true},
		{"only legacy clusterIP field", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "127.96.0.2"}}, "127.96.0.2", true},
		{"dual stack, IPv6 primary", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "fd00::1", ClusterIPs: []string{"fd00::1", "127.96.0.3"}}}, "127.96.0.3", true},
		{"IPv6 only", v1.Service{Spec: v1.ServiceSpec{ClusterIP: "fd00::1", ClusterIPs: []string{"fd00::1"}}}, "", false},
		{"headless", v1.Service{Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone, ClusterIPs: []string{v1.ClusterIPNone}}}, "", false},
		{"ExternalName", v1.Service{Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "db.example.com"}}, "", false},
		{"no ClusterIP", v1.Service{}, "", false},
		{"claimed by another proxy", v1.Service{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labelServiceProxyName: "other"}},
			Spec:       v1.ServiceSpec{ClusterIP: "127.96.0.4"},
		}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ip, ok := clusterIPv4(&tt.svc)
			got := ""
			if ok {
				got = ip.String()
			}
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("clusterIPv4() = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
