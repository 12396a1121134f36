package clusterdns_test

import (
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// podObjects add Pods for the pod-mode rules to referenceObjects (whose Pod
// 10.240.0.1 runs in testns): a dual-stack Pod, a finished one, and a Pod
// in another namespace.
func podObjects() []runtime.Object {
	return []runtime.Object{
		pod("testns", "pod-dual", corev1.PodRunning, "10.240.0.2", "fd00::2"),
		pod("testns", "pod-done", corev1.PodSucceeded, "10.240.0.3"),
		pod("testns", "pod-pending", corev1.PodPending, "10.240.0.4"),
		pod("default", "pod-other", corev1.PodRunning, "10.240.0.5"),
	}
}

// TestPodModes is case #48 in its three columns, and the other pod rules
// (CoreDNS's "pods" option), under each mode.
func TestPodModes(t *testing.T) {
	const zone = ".pod.cluster.local."
	a := func(name, ip string) []string { return []string{name + " 5 IN A " + ip} }
	type want struct {
		rcode  int
		answer []string
	}
	nx := want{rcode: dns.RcodeNameError}
	nodata := want{}
	tests := []struct {
		name                         string
		qname                        string
		qtype                        uint16
		disabled, insecure, verified want
	}{
		{"48 running Pod", "10-240-0-1.testns" + zone, dns.TypeA,
			nx, want{answer: a("10-240-0-1.testns"+zone, "10.240.0.1")}, want{answer: a("10-240-0-1.testns"+zone, "10.240.0.1")}},
		{"no Pod has the IP", "10-240-9-9.testns" + zone, dns.TypeA,
			nx, want{answer: a("10-240-9-9.testns"+zone, "10.240.9.9")}, nx},
		{"Pod in another namespace", "10-240-0-5.testns" + zone, dns.TypeA,
			nx, want{answer: a("10-240-0-5.testns"+zone, "10.240.0.5")}, nx},
		{"finished Pod", "10-240-0-3.testns" + zone, dns.TypeA,
			nx, want{answer: a("10-240-0-3.testns"+zone, "10.240.0.3")}, nx},
		{"pending Pod", "10-240-0-4.testns" + zone, dns.TypeA,
			nx, want{answer: a("10-240-0-4.testns"+zone, "10.240.0.4")}, want{answer: a("10-240-0-4.testns"+zone, "10.240.0.4")}},
		{"second IP of a dual-stack Pod", "fd00--2.testns" + zone, dns.TypeAAAA,
			nx, want{answer: []string{"fd00--2.testns" + zone + " 5 IN AAAA fd00::2"}}, want{answer: []string{"fd00--2.testns" + zone + " 5 IN AAAA fd00::2"}}},
		{"IPv4 Pod AAAA is NODATA", "10-240-0-1.testns" + zone, dns.TypeAAAA, nx, nodata, nodata},
		{"TXT on a Pod is NODATA", "10-240-0-1.testns" + zone, dns.TypeTXT, nx, nodata, nodata},
		{"SRV on a Pod is NODATA", "10-240-0-1.testns" + zone, dns.TypeSRV, nx, nodata, nodata},
		{"namespace is NODATA", "testns" + zone, dns.TypeA, nx, nodata, nodata},
		{"pod subtree is NODATA", "pod.cluster.local.", dns.TypeA, nodata, nodata, nodata},
		{"unknown namespace", "10-240-0-1.nons" + zone, dns.TypeA, nx, nx, nx},
		{"label that is not an IP", "web-0.testns" + zone, dns.TypeA, nx, nx, nx},
		{"four dashes", "1-2-3-4-5.testns" + zone, dns.TypeA, nx, nx, nx},
		{"octet out of range", "10-240-0-256.testns" + zone, dns.TypeA, nx, nx, nx},
		{"label left of the Pod", "x.10-240-0-1.testns" + zone, dns.TypeA, nx, nx, nx},
		{"mixed case", "10-240-0-1.TestNS.POD.cluster.local.", dns.TypeA,
			nx, want{answer: a("10-240-0-1.TestNS.POD.cluster.local.", "10.240.0.1")}, want{answer: a("10-240-0-1.TestNS.POD.cluster.local.", "10.240.0.1")}},
	}
	for _, mode := range []clusterdns.PodMode{clusterdns.PodsDisabled, clusterdns.PodsInsecure, clusterdns.PodsVerified} {
		t.Run(string(mode), func(t *testing.T) {
			fx := newFixture(t, clusterdns.Config{Pods: mode}, append(referenceObjects(), podObjects()...)...)
			var cases []dnsCase
			for _, tt := range tests {
				w := map[clusterdns.PodMode]want{
					clusterdns.PodsDisabled: tt.disabled, clusterdns.PodsInsecure: tt.insecure, clusterdns.PodsVerified: tt.verified,
				}[mode]
				cases = append(cases, dnsCase{name: tt.name, qname: tt.qname, qtype: tt.qtype, rcode: w.rcode, answer: w.answer})
			}
			runCases(t, fx, cases)
		})
	}
}

// TestPodsFollowAPI: in verified mode a Pod's name appears and goes with
// the Pod, right after the informer event.
func TestPodsFollowAPI(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{Pods: clusterdns.PodsVerified}, referenceObjects()...)
	pods := fx.client.CoreV1().Pods("testns")
	const qname = "10-240-7-7.testns.pod.cluster.local."
	expect := func(step string, rcode int) {
		t.Helper()
		if got := fx.ask(t, qname, dns.TypeA, true, 0); got.Rcode != rcode {
			t.Errorf("%s: %s, want %s", step, describe(got), dns.RcodeToString[rcode])
		}
	}
	expect("before", dns.RcodeNameError)
	if _, err := pods.Create(t.Context(), pod("testns", "late", corev1.PodRunning, "10.240.7.7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &corev1.Pod{}, "testns/late", present)
	expect("created", dns.RcodeSuccess)
	if _, err := pods.UpdateStatus(t.Context(), pod("testns", "late", corev1.PodFailed, "10.240.7.7"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &corev1.Pod{}, "testns/late", func(obj any) bool {
		return obj != nil && obj.(*corev1.Pod).Status.Phase == corev1.PodFailed
	})
	expect("failed", dns.RcodeNameError)
}
