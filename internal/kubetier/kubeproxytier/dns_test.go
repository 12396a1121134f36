package kubeproxytier

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/netns"
)

// headless is Service pricing-headless in ns: no ClusterIP, the pricing
// pods.
func headless(ns string) []runtime.Object {
	return []runtime.Object{&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pricing-headless", Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "pricing"},
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")}}}}}
}

// ask sends question name/A over UDP from src to server and returns the
// reply.
func ask(t *testing.T, src netip.Addr, server netip.AddrPort, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Timeout: 5 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: src.AsSlice()}}}
	r, _, err := c.Exchange(m, server.String())
	if err != nil {
		t.Fatalf("A %s from %v to %v: %v", name, src, server, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("A %s: %s, want NOERROR", name, dns.RcodeToString[r.Rcode])
	}
	return r
}

// addrs returns the A records' addresses of r, sorted.
func addrs(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestCoreDNSAnswersThroughKubeDNS: under the real dataplane the cluster
// DNS is the real CoreDNS, on a pod address behind kube-dns's
// EndpointSlice. Asked at the kube-dns ClusterIP from a pod address (the
// kernel DNATs the query to CoreDNS), it answers a headless Service with
// one A per ready pod and a ClusterIP Service with its ClusterIP; the
// lab's query log, fed by CoreDNS's dnstap, records both answers as the
// report would show them: name, type, NOERROR, the number of records,
// the asking pod address.
func TestCoreDNSAnswersThroughKubeDNS(t *testing.T) {
	useLab(t, lab.DataplaneKubeProxyNFTables)
	if dp, logs := theLab.Dataplane(), theLab.DataplaneLogs(); dp.KubeProxyMode() == "" || logs["CoreDNS"] == "" {
		t.Fatalf("lab's dataplane %s, its logs %v; want the real one, with CoreDNS's log", dp, logs)
	}
	if want := netip.AddrPortFrom(lab.DNSPodIP(netns.PodPrefix), 53).String(); theLab.DNSAddr() != want {
		t.Errorf("DNSAddr %s, want CoreDNS's %s", theLab.DNSAddr(), want)
	}
	ns := "coredns"
	ctx := setUp(t, ns, 3)
	if err := theLab.Apply(ctx, headless(ns)); err != nil {
		t.Fatal(err)
	}
	if err := theLab.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, ip := range readyPods(t, ctx, ns) {
		want = append(want, ip)
	}
	slices.Sort(want)
	if len(want) != 3 {
		t.Fatalf("ready pods %v, want 3", want)
	}
	kubeDNS, err := theLab.Service(clusterdns.DefaultDNSService.Namespace, clusterdns.DefaultDNSService.Name)
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.AddrPortFrom(netip.MustParseAddr(kubeDNS.Spec.ClusterIP), 53)
	svc, err := theLab.Service(ns, "pricing")
	if err != nil {
		t.Fatal(err)
	}
	src, err := theLab.AllocateIP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { theLab.Cluster.PodIPs().Release(src) })

	hlName, ciName := fmt.Sprintf("pricing-headless.%s.svc.cluster.local.", ns), fmt.Sprintf("pricing.%s.svc.cluster.local.", ns)
	// The EndpointSlice controller and CoreDNS's watch may lag the pods'
	// readiness: ask until CoreDNS lists all 3.
	var got []string
	err = labtest.Poll(ctx, 100*time.Millisecond, func() bool {
		got = addrs(ask(t, src, vip, hlName))
		return len(got) == len(want)
	})
	if err != nil {
		t.Fatalf("CoreDNS via %v: %s has A %v; want one per ready pod %v: %v", vip, hlName, got, want, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("A %s via %v (-ready pods +answer):\n%s", hlName, vip, diff)
	}
	t.Logf("CoreDNS at %s, asked at %v from %v: %s A %v", theLab.DNSAddr(), vip, src, hlName, got)
	if got := addrs(ask(t, src, vip, ciName)); !slices.Equal(got, []string{svc.Spec.ClusterIP}) {
		t.Errorf("A %s via %v: %v, want the ClusterIP %s", ciName, vip, got, svc.Spec.ClusterIP)
	}

	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := theLab.SyncDNSLog(syncCtx); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Name, Type, Rcode, Network string
		Answers                    int
	}
	var logged []entry
	for _, ev := range dnsLog.from(src) {
		logged = append(logged, entry{ev.Name, dns.TypeToString[ev.Type], dns.RcodeToString[ev.Rcode], ev.Network, ev.Answers})
	}
	// The last two answers to src: the headless name's (after any asked
	// while the slices caught up) and the ClusterIP name's.
	wantLog := []entry{{hlName, "A", "NOERROR", "udp", 3}, {ciName, "A", "NOERROR", "udp", 1}}
	t.Logf("query log from %v: %v", src, logged)
	if len(logged) < 2 {
		t.Fatalf("query log from %v: %v; want at least %v", src, logged, wantLog)
	}
	if diff := cmp.Diff(wantLog, logged[len(logged)-2:]); diff != "" {
		t.Errorf("query log from %v, last two (-want +got):\n%s\nall: %v", src, diff, logged)
	}
	for _, e := range logged[:len(logged)-2] {
		if e.Name != hlName {
			t.Errorf("query log from %v has %v; only %s was asked before", src, e, hlName)
		}
	}
}
