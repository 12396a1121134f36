package clusterdns_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// TestTruncation is cases #51-#53: 100 A records for big.testns over UDP
// without EDNS0, with EDNS0 1232, and over TCP.
func TestTruncation(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	all := bigAddrs(100)
	tests := []struct {
		name    string
		tcp     bool
		edns    uint16
		want    int
		tc      bool
		maxSize int
	}{
		{"51 UDP without EDNS0", false, 0, 29, true, 512},
		{"52 UDP with EDNS0 1232", false, 1232, 73, true, 1232},
		{"EDNS0 below 512 counts as 512, OPT included", false, 256, 28, true, 512},
		{"UDP with EDNS0 4096", false, 4096, 100, false, 4096},
		{"53 TCP", true, 0, 100, false, dns.MaxMsgSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tn("big"), dns.TypeA)
			if tt.edns != 0 {
				m.SetEdns0(tt.edns, false)
			}
			w := newRecorder(tt.tcp)
			fx.srv.ServeDNS(w, m)
			if w.err != nil {
				t.Fatal(w.err)
			}
			got := w.msg
			if len(got.Answer) != tt.want || got.Truncated != tt.tc || got.Rcode != dns.RcodeSuccess {
				t.Errorf("got %s, want %d answers and tc=%v", describe(got), tt.want, tt.tc)
			}
			if w.size > tt.maxSize {
				t.Errorf("reply is %d bytes, limit %d", w.size, tt.maxSize)
			}
			if (got.IsEdns0() != nil) != (tt.edns != 0) {
				t.Errorf("OPT present = %v, want %v", got.IsEdns0() != nil, tt.edns != 0)
			}
			for _, ip := range addrsOf(got) {
				if !slices.Contains(all, ip) {
					t.Errorf("answer has %s, not an endpoint of big", ip)
				}
			}
		})
	}
}

// TestCompression: replies that fit go uncompressed, as CoreDNS sends
// them, unless they have more than 16 records or would pass the IPv4
// fragmentation limit (1480 bytes) over UDP; replies that do not fit are
// compressed by the truncation.
func TestCompression(t *testing.T) {
	long := strings.Repeat("h", 60)
	var eps []discoveryv1.Endpoint
	for i := range 8 {
		eps = append(eps, endpoint(fmt.Sprintf("172.1.0.%d", i+1), fmt.Sprintf("%s-%d", long, i), isReady))
	}
	fx := newFixture(t, clusterdns.Config{}, append(referenceObjects(),
		headlessService("testns", "long", httpPort),
		endpointSlice("testns", "long", "long-x", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{httpSlicePort}, eps...))...)
	tests := []struct {
		name       string
		qname      string
		qtype      uint16
		tcp        bool
		edns       uint16
		compressed bool
	}{
		{"small UDP reply", tn("svc1"), dns.TypeA, false, 0, false},
		{"small TCP reply", "_http._tcp." + tn("hdls"), dns.TypeSRV, true, 0, false},
		{"many records over TCP", tn("big"), dns.TypeA, true, 0, true},
		{"truncated UDP reply", tn("big"), dns.TypeA, false, 0, true},
		{"16 records above 1480 bytes over UDP", tn("long"), dns.TypeSRV, false, 4096, true},
		{"16 records above 1480 bytes over TCP", tn("long"), dns.TypeSRV, true, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tt.qname, tt.qtype)
			if tt.edns != 0 {
				m.SetEdns0(tt.edns, false)
			}
			w := newRecorder(tt.tcp)
			fx.srv.ServeDNS(w, m)
			if w.err != nil {
				t.Fatal(w.err)
			}
			w.msg.Compress = false
			if got := w.size < w.msg.Len(); got != tt.compressed {
				t.Errorf("compressed = %v (%d bytes, %d uncompressed, %s), want %v",
					got, w.size, w.msg.Len(), describe(w.msg), tt.compressed)
			}
		})
	}
}

// TestEndpointsFollowAPI changes a headless Service's EndpointSlices
// through the clientset and waits for each change to show in answers.
func TestEndpointsFollowAPI(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	esClient := fx.client.DiscoveryV1().EndpointSlices("testns")
	ctx := t.Context()
	v4 := discoveryv1.AddressTypeIPv4
	http := []discoveryv1.EndpointPort{httpSlicePort}

	expect := func(step string, want ...string) {
		t.Helper()
		fx.waitFor(t, func() string {
			got := addrsOf(fx.ask(t, tn("hdls"), dns.TypeA, true, 0))
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Sprintf("%s: hdls A (-want +got):\n%s", step, diff)
			}
			return ""
		})
	}
	expect("start", "172.0.0.2", "172.0.0.3", "172.0.0.4")

	// Case #35: the pod of 172.0.0.3 starts terminating, still serving.
	terminating := endpoint("172.0.0.3", "", notReady)
	terminating.Conditions.Serving, terminating.Conditions.Terminating = isReady, isReady
	es := endpointSlice("testns", "hdls", "hdls-v4", v4, http,
		endpoint("172.0.0.2", "", isReady), terminating, endpoint("172.0.0.4", "web-0", isReady))
	if _, err := esClient.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("terminating", "172.0.0.2", "172.0.0.4")

	es.Endpoints = append(es.Endpoints, endpoint("172.0.0.5", "", isReady))
	if _, err := esClient.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("scaled up", "172.0.0.2", "172.0.0.4", "172.0.0.5")

	second := endpointSlice("testns", "hdls", "hdls-v4-b", v4, http,
		endpoint("172.0.0.6", "", isReady), endpoint("172.0.0.2", "", isReady))
	if _, err := esClient.Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("second slice, duplicate IP once", "172.0.0.2", "172.0.0.4", "172.0.0.5", "172.0.0.6")

	if err := esClient.Delete(ctx, "hdls-v4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("first slice deleted", "172.0.0.2", "172.0.0.6")

	if err := esClient.Delete(ctx, "hdls-v4-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.waitFor(t, func() string {
		got := fx.ask(t, tn("hdls"), dns.TypeAAAA, true, 0)
		if len(got.Answer) != 1 {
			return "IPv6 slice should still answer: " + describe(got)
		}
		if got := fx.ask(t, tn("hdls"), dns.TypeA, true, 0); got.Rcode != dns.RcodeSuccess || len(got.Answer) != 0 {
			return "A with only an IPv6 endpoint left should be NODATA: " + describe(got)
		}
		return ""
	})
}

// TestServicesFollowAPI creates, changes and deletes Services and sees the
// zone follow.
func TestServicesFollowAPI(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, namespace("testns"))
	svcs := fx.client.CoreV1().Services("testns")
	ctx := t.Context()

	if got := fx.ask(t, tn("late"), dns.TypeA, true, 0); got.Rcode != dns.RcodeNameError {
		t.Fatalf("before create: %s, want NXDOMAIN", describe(got))
	}
	if _, err := svcs.Create(ctx, clusterIPService("testns", "late", []string{"10.0.9.9"}, httpPort), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.waitFor(t, func() string {
		if got := addrsOf(fx.ask(t, tn("late"), dns.TypeA, true, 0)); !slices.Equal(got, []string{"10.0.9.9"}) {
			return fmt.Sprintf("after create: %v", got)
		}
		return ""
	})
	if err := svcs.Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fx.waitFor(t, func() string {
		if got := fx.ask(t, tn("late"), dns.TypeA, true, 0); got.Rcode != dns.RcodeNameError {
			return "after delete: " + describe(got)
		}
		return ""
	})
}

// addrsOf returns the A/AAAA addresses of m's answer, sorted by address.
func addrsOf(m *dns.Msg) []string {
	var ips []string
	for _, rr := range m.Answer {
		switch v := rr.(type) {
		case *dns.A:
			ips = append(ips, v.A.String())
		case *dns.AAAA:
			ips = append(ips, v.AAAA.String())
		}
	}
	return sortedIPs(ips)
}

// sortedIPs returns addresses sorted by address, in netip form.
func sortedIPs(addrs []string) []string {
	ips := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		ips[i] = netip.MustParseAddr(a)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}
