package lab

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/proxy"
)

// TestDualStackDNS: a dual-stack Service keeps its IPv6 ClusterIP through
// the lab's API server, and the cluster DNS serves it (AAAA and ip6.arpa
// PTR) next to the IPv4 one; so does an IPv6 endpoint of a hand-written
// EndpointSlice. No traffic goes to either.
func TestDualStackDNS(t *testing.T) {
	l := startLab(t, Config{}, nil)
	v4 := l.ServiceCIDR().Addr().Next().Next().Next() // .3: neither network, gateway nor DNS
	policy := corev1.IPFamilyPolicyRequireDualStack
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "data"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dual", Namespace: "data"}, Spec: corev1.ServiceSpec{
			ClusterIPs: []string{v4.String(), "fd00:10:96::3"}, IPFamilyPolicy: &policy,
			Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "legacy6", Namespace: "data"}, Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}}},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy6-1", Namespace: "data",
				Labels: map[string]string{discoveryv1.LabelServiceName: "legacy6"}},
			AddressType: discoveryv1.AddressTypeIPv6,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"2001:db8::10"}}},
		},
	}
	if err := l.Apply(labtest.Context(t, 10*time.Second), objs); err != nil {
		t.Fatal(err)
	}
	ptr6, _ := dns.ReverseAddr("fd00:10:96::3")
	ptrEP, _ := dns.ReverseAddr("2001:db8::10")
	tests := []struct {
		name  string
		qname string
		qtype uint16
		want  []string // record data, in any order
	}{
		{"dual-stack A", "dual.data.svc.cluster.local.", dns.TypeA, []string{v4.String()}},
		{"dual-stack AAAA", "dual.data.svc.cluster.local.", dns.TypeAAAA, []string{"fd00:10:96::3"}},
		{"IPv6 ClusterIP PTR", ptr6, dns.TypePTR, []string{"dual.data.svc.cluster.local."}},
		{"IPv6 endpoint AAAA", "legacy6.data.svc.cluster.local.", dns.TypeAAAA, []string{"2001:db8::10"}},
		{"IPv6 endpoint PTR", ptrEP, dns.TypePTR, []string{"2001-db8--10.legacy6.data.svc.cluster.local."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			labtest.WaitFor(t, 10*time.Second, tt.name, func() bool {
				got = exchangeData(t, l.DNSAddr(), tt.qname, tt.qtype)
				return slices.Equal(got, tt.want)
			})
		})
	}
	if rules := l.dp.(*pinlabDataplane).proxy.Rules(); slices.ContainsFunc(rules, func(r proxy.Rule) bool { return r.VIP.Addr().Is6() }) {
		t.Errorf("kube-proxy serves an IPv6 VIP: %v", rules)
	}
}

// exchangeData asks the lab's DNS one question and returns the data of
// the answer records, sorted.
func exchangeData(t *testing.T, server, qname string, qtype uint16) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	r, _, err := new(dns.Client).Exchange(m, server)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, netip.MustParseAddr(v.AAAA.String()).String())
		case *dns.PTR:
			out = append(out, v.Ptr)
		}
	}
	slices.Sort(out)
	return out
}
