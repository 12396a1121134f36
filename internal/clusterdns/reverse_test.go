package clusterdns_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// The SOAs of the reverse zones, serial zeroed as rrStrings does.
const (
	rev4SOA = "in-addr.arpa. 5 IN SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 0 7200 1800 86400 5"
	rev6SOA = "ip6.arpa. 5 IN SOA ns.dns.ip6.arpa. hostmaster.ip6.arpa. 0 7200 1800 86400 5"
)

// reverseObjects add what referenceObjects lack for the PTR rules: an
// endpoint of two Services (CoreDNS's "double-ep" at 10.0.0.99), the same
// endpoint in two slices of one Service, a slice whose Service is gone and
// an endpoint at another Service's ClusterIP.
func reverseObjects() []runtime.Object {
	const ns = "testns"
	v4 := discoveryv1.AddressTypeIPv4
	http := []discoveryv1.EndpointPort{httpSlicePort}
	return []runtime.Object{
		endpointSlice(ns, "svc1", "svc1-dbl", v4, http, endpoint("10.0.0.99", "double-ep", isReady)),
		endpointSlice(ns, "svc2", "svc2-dbl", v4, http, endpoint("10.0.0.99", "double-ep", isReady)),
		endpointSlice(ns, "svc1", "svc1-skew", v4, http, endpoint("172.0.0.1", "ep1a", isReady)),
		endpointSlice(ns, "gone", "gone-x", v4, http, endpoint("172.0.0.50", "", isReady)),
		endpointSlice(ns, "unnamed", "unnamed-x", v4, http, endpoint("10.0.0.2", "", isReady)),
	}
}

// nibbles is the ip6.arpa. name of an IPv6 address.
func nibbles(ip string) string {
	name, err := dns.ReverseAddr(ip)
	if err != nil {
		panic(err)
	}
	return name
}

func TestReverse(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, append(referenceObjects(), reverseObjects()...)...)
	ptr := func(owner, target string) string { return owner + " 5 IN PTR " + target }
	v6hdls := nibbles("5678:abcd::1")
	runCases(t, fx, []dnsCase{
		// PTR records.
		{name: "ClusterIP wins over an endpoint at the same IP", qname: "2.0.0.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{ptr("2.0.0.10.in-addr.arpa.", tn("svc2"))}},
		{name: "endpoint of two Services gets two PTRs", qname: "99.0.0.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{
				ptr("99.0.0.10.in-addr.arpa.", "double-ep."+tn("svc1")),
				ptr("99.0.0.10.in-addr.arpa.", "double-ep."+tn("svc2")),
			}},
		{name: "endpoint in two slices of one Service gets one PTR", qname: "1.0.0.172.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{ptr("1.0.0.172.in-addr.arpa.", "ep1a."+tn("svc1"))}},
		{name: "endpoint without hostname is named by its dashed IP", qname: "2.0.0.172.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{ptr("2.0.0.172.in-addr.arpa.", "172-0-0-2."+tn("hdls"))}},
		{name: "unset ready counts as ready", qname: "3.0.0.172.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{ptr("3.0.0.172.in-addr.arpa.", "172-0-0-3."+tn("hdls"))}},
		{name: "publishNotReadyAddresses endpoint", qname: "11.0.0.172.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{ptr("11.0.0.172.in-addr.arpa.", "db-0."+tn("hdlspnr"))}},
		{name: "IPv6 ClusterIP", qname: nibbles("1234:abcd::1"), qtype: dns.TypePTR,
			answer: []string{ptr(nibbles("1234:abcd::1"), tn("svc6"))}},
		{name: "IPv6 endpoint", qname: v6hdls, qtype: dns.TypePTR,
			answer: []string{ptr(v6hdls, "5678-abcd--1."+tn("hdls"))}},
		{name: "dual-stack IPv4", qname: "3.0.0.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{ptr("3.0.0.10.in-addr.arpa.", tn("dual"))}},
		{name: "dual-stack IPv6", qname: nibbles("10::3"), qtype: dns.TypePTR,
			answer: []string{ptr(nibbles("10::3"), tn("dual"))}},
		{name: "the DNS Service", qname: "10.0.96.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{ptr("10.0.96.10.in-addr.arpa.", "kube-dns.kube-system.svc.cluster.local.")}},
		{name: "mixed case echoes the owner, not the target", qname: "1.0.0.10.In-Addr.ARPA.", qtype: dns.TypePTR,
			answer: []string{ptr("1.0.0.10.In-Addr.ARPA.", tn("svc1"))}},

		// Names without PTR records.
		{name: "unknown IP", qname: "9.9.9.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "unknown IPv6", qname: nibbles("fd00::1"), qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev6SOA}},
		{name: "not-ready endpoint", qname: "9.0.0.172.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "endpoint of a Service that is gone", qname: "50.0.0.172.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "ExternalName target IP", qname: "1.2.0.192.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "mixed-case NXDOMAIN keeps the zone's spelling", qname: "9.9.9.10.IN-ADDR.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError,
			ns: []string{"IN-ADDR.arpa. 5 IN SOA ns.dns.IN-ADDR.arpa. hostmaster.IN-ADDR.arpa. 0 7200 1800 86400 5"}},

		// Other types, and names that are not addresses.
		{name: "A on a name with PTR is NODATA", qname: "1.0.0.10.in-addr.arpa.", qtype: dns.TypeA, ns: []string{rev4SOA}},
		{name: "TXT on a name with PTR is NODATA", qname: v6hdls, qtype: dns.TypeTXT, ns: []string{rev6SOA}},
		{name: "SOA below the apex is NODATA", qname: "1.0.0.10.in-addr.arpa.", qtype: dns.TypeSOA, ns: []string{rev4SOA}},
		{name: "A on an unknown IP is NXDOMAIN", qname: "9.9.9.10.in-addr.arpa.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "empty non-terminal is NODATA", qname: "0.0.10.in-addr.arpa.", qtype: dns.TypePTR, ns: []string{rev4SOA}},
		{name: "empty non-terminal one label", qname: "172.in-addr.arpa.", qtype: dns.TypeNS, ns: []string{rev4SOA}},
		{name: "IPv6 empty non-terminal", qname: "d.c.b.a.4.3.2.1.ip6.arpa.", qtype: dns.TypePTR, ns: []string{rev6SOA}},
		{name: "prefix without PTR below", qname: "9.9.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "prefix with only a not-ready endpoint", qname: "9.0.0.172.in-addr.arpa.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "leading zero", qname: "01.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "octet above 255", qname: "256.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "five labels", qname: "1.1.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},
		{name: "IPv6 label of two digits", qname: "10." + strings.TrimPrefix(nibbles("1234:abcd::1"), "1.0."), qtype: dns.TypePTR,
			rcode: dns.RcodeNameError, ns: []string{rev6SOA}},
		{name: "cluster grammar does not apply", qname: "svc1.testns.svc.in-addr.arpa.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{rev4SOA}},

		// The apex.
		{name: "apex SOA", qname: "in-addr.arpa.", qtype: dns.TypeSOA, answer: []string{rev4SOA}, ns: []string{}},
		{name: "IPv6 apex SOA", qname: "ip6.arpa.", qtype: dns.TypeSOA, answer: []string{rev6SOA}, ns: []string{}},
		{name: "apex NS names the DNS Service in the cluster zone", qname: "in-addr.arpa.", qtype: dns.TypeNS,
			answer: []string{"in-addr.arpa. 5 IN NS kube-dns.kube-system.svc.cluster.local."},
			extra:  []string{"kube-dns.kube-system.svc.cluster.local. 5 IN A 10.96.0.10"}},
		{name: "apex PTR is NODATA", qname: "in-addr.arpa.", qtype: dns.TypePTR, ns: []string{rev4SOA}},
		{name: "apex A is NODATA", qname: "ip6.arpa.", qtype: dns.TypeA, ns: []string{rev6SOA}},
		{name: "arpa itself is outside", qname: "arpa.", qtype: dns.TypeSOA, rcode: dns.RcodeRefused, ns: []string{}},
	})
}

// TestNoReverseZones: with the reverse zones off they are REFUSED like any
// other name outside the cluster zone.
func TestNoReverseZones(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{NoReverseZones: true}, referenceObjects()...)
	runCases(t, fx, []dnsCase{
		{name: "PTR", qname: "1.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused, ns: []string{}},
		{name: "IPv6 PTR", qname: nibbles("1234:abcd::1"), qtype: dns.TypePTR, rcode: dns.RcodeRefused, ns: []string{}},
		{name: "apex SOA", qname: "in-addr.arpa.", qtype: dns.TypeSOA, rcode: dns.RcodeRefused, ns: []string{}},
		{name: "cluster zone still served", qname: tn("svc1"), qtype: dns.TypeA,
			answer: []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
	})
}

// TestReverseFollowsAPI changes Services and endpoints and checks the PTR
// answer right after the informer event, with no retry: the answer cache
// must never hold a stale answer once the informers show a change.
func TestReverseFollowsAPI(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	ctx := t.Context()
	svcs := fx.client.CoreV1().Services("testns")
	slicesAPI := fx.client.DiscoveryV1().EndpointSlices("testns")
	expect := func(step, qname string, want ...string) {
		t.Helper()
		got := fx.ask(t, qname, dns.TypePTR, true, 0)
		var targets []string
		for _, rr := range got.Answer {
			targets = append(targets, rr.(*dns.PTR).Ptr)
		}
		if fmt.Sprint(targets) != fmt.Sprint(want) {
			t.Errorf("%s: PTR %s = %v (%s), want %v", step, qname, targets, describe(got), want)
		}
	}
	const newIP = "7.9.0.10.in-addr.arpa."
	expect("before", newIP)

	if _, err := svcs.Create(ctx, clusterIPService("testns", "late", []string{"10.0.9.7"}, httpPort), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &corev1.Service{}, "testns/late", present)
	expect("created", newIP, tn("late"))

	if err := svcs.Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &corev1.Service{}, "testns/late", absent)
	expect("deleted", newIP)

	expect("endpoint ready", "4.0.0.172.in-addr.arpa.", "web-0."+tn("hdls"))
	es := endpointSlice("testns", "hdls", "hdls-v4", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{httpSlicePort}, endpoint("172.0.0.4", "web-0", notReady))
	if _, err := slicesAPI.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &discoveryv1.EndpointSlice{}, "testns/hdls-v4", func(obj any) bool {
		return obj != nil && len(obj.(*discoveryv1.EndpointSlice).Endpoints) == 1
	})
	expect("endpoint not ready", "4.0.0.172.in-addr.arpa.")
	if got := fx.ask(t, "0.0.172.in-addr.arpa.", dns.TypePTR, true, 0); got.Rcode != dns.RcodeSuccess {
		t.Errorf("0.0.172.in-addr.arpa. = %s, want NODATA: 172.0.0.2 is still ready", describe(got))
	}

	svc := clusterIPService("testns", "svc1", []string{"10.0.0.41"}, httpPort)
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.untilStored(t, &corev1.Service{}, "testns/svc1", func(obj any) bool {
		return obj != nil && obj.(*corev1.Service).Spec.ClusterIP == "10.0.0.41"
	})
	expect("old ClusterIP", "1.0.0.10.in-addr.arpa.")
	expect("new ClusterIP", "41.0.0.10.in-addr.arpa.", tn("svc1"))
}
