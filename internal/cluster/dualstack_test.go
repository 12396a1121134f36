package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDualStackService: a Service that writes an IPv6 ClusterIP keeps it
// (the DNS serves it as AAAA), with the families and policy the API server
// stores; what the lab cannot give is refused at its field.
func TestDualStackService(t *testing.T) {
	c := startCluster(t)
	svcs := c.Client().CoreV1().Services("shop")
	policy := func(p corev1.IPFamilyPolicy) *corev1.IPFamilyPolicy { return &p }
	dual := func(name, v4, v6 string, p *corev1.IPFamilyPolicy) *corev1.Service {
		s := service(name, false)
		s.Spec.ClusterIPs = []string{v4, v6}
		s.Spec.IPFamilyPolicy = p
		return s
	}
	tests := []struct {
		name       string
		svc        *corev1.Service
		wantIPs    []string
		wantPolicy corev1.IPFamilyPolicy
		wantField  string // an Invalid error at this field instead
	}{
		{name: "RequireDualStack keeps the IPv6 ClusterIP",
			svc:     dual("req", "127.96.1.1", "fd00:10:96::1", policy(corev1.IPFamilyPolicyRequireDualStack)),
			wantIPs: []string{"127.96.1.1", "fd00:10:96::1"}, wantPolicy: corev1.IPFamilyPolicyRequireDualStack},
		{name: "two ClusterIPs without a policy ask for RequireDualStack",
			svc:     dual("nopolicy", "127.96.1.2", "FD00:10:96::2", nil),
			wantIPs: []string{"127.96.1.2", "fd00:10:96::2"}, wantPolicy: corev1.IPFamilyPolicyRequireDualStack},
		{name: "clusterIP filled from clusterIPs",
			svc: func() *corev1.Service {
				s := dual("fill", "127.96.1.3", "fd00:10:96::3", policy(corev1.IPFamilyPolicyPreferDualStack))
				s.Spec.ClusterIP = ""
				return s
			}(),
			wantIPs: []string{"127.96.1.3", "fd00:10:96::3"}, wantPolicy: corev1.IPFamilyPolicyPreferDualStack},
		{name: "PreferDualStack without an IPv6 address is IPv4 only",
			svc: func() *corev1.Service {
				s := service("prefer", false)
				s.Spec.IPFamilyPolicy = policy(corev1.IPFamilyPolicyPreferDualStack)
				return s
			}(),
			wantPolicy: corev1.IPFamilyPolicyPreferDualStack},
		{name: "RequireDualStack without an IPv6 address",
			svc: func() *corev1.Service {
				s := service("require", false)
				s.Spec.IPFamilyPolicy = policy(corev1.IPFamilyPolicyRequireDualStack)
				return s
			}(),
			wantField: "spec.ipFamilyPolicy"},
		{name: "SingleStack with two ClusterIPs",
			svc:       dual("single", "127.96.1.4", "fd00:10:96::4", policy(corev1.IPFamilyPolicySingleStack)),
			wantField: "spec.ipFamilyPolicy"},
		{name: "two IPv4 ClusterIPs",
			svc:       dual("twov4", "127.96.1.5", "127.96.1.6", nil),
			wantField: "spec.clusterIPs[1]"},
		{name: "IPv6 primary",
			svc:       dual("v6first", "fd00:10:96::7", "127.96.1.7", nil),
			wantField: "spec.clusterIP"},
		{name: "clusterIPs[0] differs from clusterIP",
			svc: func() *corev1.Service {
				s := dual("mismatch", "127.96.1.8", "fd00:10:96::8", nil)
				s.Spec.ClusterIP = "127.96.1.9"
				return s
			}(),
			wantField: "spec.clusterIPs[0]"},
		{name: "IPv6 family first",
			svc: func() *corev1.Service {
				s := service("fam", false)
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
				return s
			}(),
			wantField: "spec.ipFamilies[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := svcs.Create(context.Background(), tt.svc, metav1.CreateOptions{})
			if tt.wantField != "" {
				checkInvalidAt(t, err, tt.wantField)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.wantIPs
			if want == nil {
				want = []string{got.Spec.ClusterIP}
			}
			if diff := cmp.Diff(want, got.Spec.ClusterIPs); diff != "" {
				t.Errorf("clusterIPs (-want +got):\n%s", diff)
			}
			if got.Spec.ClusterIP != want[0] {
				t.Errorf("clusterIP %s, want %s", got.Spec.ClusterIP, want[0])
			}
			families := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}[:len(want)]
			if diff := cmp.Diff(families, got.Spec.IPFamilies); diff != "" {
				t.Errorf("ipFamilies (-want +got):\n%s", diff)
			}
			if got.Spec.IPFamilyPolicy == nil || *got.Spec.IPFamilyPolicy != tt.wantPolicy {
				t.Errorf("ipFamilyPolicy %v, want %s", got.Spec.IPFamilyPolicy, tt.wantPolicy)
			}
		})
	}

	// An update that leaves clusterIPs out keeps them, as the API server does.
	s, err := svcs.Get(context.Background(), "req", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = nil, nil, nil
	s.Spec.Ports[0].Port = 8472
	up, err := svcs.Update(context.Background(), s, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"127.96.1.1", "fd00:10:96::1"}, up.Spec.ClusterIPs); diff != "" {
		t.Errorf("clusterIPs after an update without them (-want +got):\n%s", diff)
	}
}

// checkInvalidAt fails unless err is an Invalid API error with a cause at
// field.
func checkInvalidAt(t *testing.T, err error, field string) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) || !apierrors.IsInvalid(err) || se.ErrStatus.Details == nil {
		t.Fatalf("error %v, want Invalid at %s", err, field)
	}
	for _, c := range se.ErrStatus.Details.Causes {
		if c.Field == field {
			return
		}
	}
	t.Errorf("error %v has no cause at %s", err, field)
}
