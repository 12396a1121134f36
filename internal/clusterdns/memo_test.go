package clusterdns_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/labtest"
)

// TestMemoFollowsAPI warms the answer memo, changes the API objects
// behind each answer, waits only until the informer cache shows the change
// and asks once: every kind of dependency must invalidate the answer.
func TestMemoFollowsAPI(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{Pods: clusterdns.PodsInsecure}, append(referenceObjects(), extraObjects()...)...)
	ctx := t.Context()
	svcs := fx.client.CoreV1().Services("testns")
	esAPI := fx.client.DiscoveryV1().EndpointSlices("testns")
	nsAPI := fx.client.CoreV1().Namespaces()
	v4, http := discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{httpSlicePort}

	tests := []struct {
		name   string
		qname  string
		qtype  uint16
		before dnsCase
		change func() error
		kind   runtime.Object
		key    string
		ready  func(obj any) bool
		after  dnsCase
	}{
		{
			name: "negative answer of a new Service", qname: tn("fresh"), qtype: dns.TypeA,
			before: dnsCase{rcode: dns.RcodeNameError},
			change: func() error {
				_, err := svcs.Create(ctx, clusterIPService("testns", "fresh", []string{"10.0.9.1"}, httpPort), metav1.CreateOptions{})
				return err
			},
			kind: &corev1.Service{}, key: "testns/fresh", ready: present,
			after: dnsCase{answer: []string{tn("fresh") + " 5 IN A 10.0.9.1"}},
		},
		{
			name: "endpoint label moves with its slice", qname: "172-0-0-30." + tn("noports"), qtype: dns.TypeA,
			before: dnsCase{answer: []string{"172-0-0-30." + tn("noports") + " 5 IN A 172.0.0.30"}},
			change: func() error {
				es := endpointSlice("testns", "dupname", "noports-x", v4, nil, endpoint("172.0.0.30", "", isReady))
				_, err := esAPI.Update(ctx, es, metav1.UpdateOptions{})
				return err
			},
			kind: &discoveryv1.EndpointSlice{}, key: "testns/noports-x",
			ready: func(obj any) bool {
				return obj != nil && obj.(*discoveryv1.EndpointSlice).Labels[discoveryv1.LabelServiceName] == "dupname"
			},
			after: dnsCase{rcode: dns.RcodeNameError},
		},
		{
			name: "ClusterIP of a Service with endpoints", qname: tn("svc1"), qtype: dns.TypeA,
			before: dnsCase{answer: []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
			change: func() error {
				_, err := svcs.Update(ctx, clusterIPService("testns", "svc1", []string{"10.0.0.12"}, httpPort), metav1.UpdateOptions{})
				return err
			},
			kind: &corev1.Service{}, key: "testns/svc1",
			ready: func(obj any) bool { return obj != nil && obj.(*corev1.Service).Spec.ClusterIP == "10.0.0.12" },
			after: dnsCase{answer: []string{tn("svc1") + " 5 IN A 10.0.0.12"}},
		},
		{
			name: "ExternalName chase follows its target", qname: tn("ext2svc"), qtype: dns.TypeA,
			before: dnsCase{answer: []string{tn("ext2svc") + " 5 IN CNAME " + tn("svc1"), tn("svc1") + " 5 IN A 10.0.0.12"}},
			change: func() error {
				_, err := svcs.Update(ctx, clusterIPService("testns", "svc1", []string{"10.0.0.11"}, httpPort), metav1.UpdateOptions{})
				return err
			},
			kind: &corev1.Service{}, key: "testns/svc1",
			ready: func(obj any) bool { return obj != nil && obj.(*corev1.Service).Spec.ClusterIP == "10.0.0.11" },
			after: dnsCase{answer: []string{tn("ext2svc") + " 5 IN CNAME " + tn("svc1"), tn("svc1") + " 5 IN A 10.0.0.11"}},
		},
		{
			name: "namespace appears", qname: "newns.svc.cluster.local.", qtype: dns.TypeA,
			before: dnsCase{rcode: dns.RcodeNameError},
			change: func() error {
				_, err := nsAPI.Create(ctx, namespace("newns"), metav1.CreateOptions{})
				return err
			},
			kind: &corev1.Namespace{}, key: "newns", ready: present,
			after: dnsCase{},
		},
		{
			name: "pod name in a new namespace", qname: "10-240-0-1.newns2.pod.cluster.local.", qtype: dns.TypeA,
			before: dnsCase{rcode: dns.RcodeNameError},
			change: func() error {
				_, err := nsAPI.Create(ctx, namespace("newns2"), metav1.CreateOptions{})
				return err
			},
			kind: &corev1.Namespace{}, key: "newns2", ready: present,
			after: dnsCase{answer: []string{"10-240-0-1.newns2.pod.cluster.local. 5 IN A 10.240.0.1"}},
		},
		{
			name: "name server follows the DNS Service", qname: "ns.dns.cluster.local.", qtype: dns.TypeA,
			before: dnsCase{answer: []string{"ns.dns.cluster.local. 5 IN A 10.96.0.10"}},
			change: func() error {
				svc := clusterIPService("kube-system", "kube-dns", []string{"10.96.0.53"}, port("dns", corev1.ProtocolUDP, 53))
				_, err := fx.client.CoreV1().Services("kube-system").Update(ctx, svc, metav1.UpdateOptions{})
				return err
			},
			kind: &corev1.Service{}, key: "kube-system/kube-dns",
			ready: func(obj any) bool { return obj != nil && obj.(*corev1.Service).Spec.ClusterIP == "10.96.0.53" },
			after: dnsCase{answer: []string{"ns.dns.cluster.local. 5 IN A 10.96.0.53"}},
		},
		{
			name: "SRV of a deleted slice", qname: "_http._tcp." + tn("dupname"), qtype: dns.TypeSRV,
			before: dnsCase{
				answer: []string{
					"_http._tcp." + tn("dupname") + " 5 IN SRV 0 33 80 dup." + tn("dupname"),
					"_http._tcp." + tn("dupname") + " 5 IN SRV 0 33 80 172-0-0-22." + tn("dupname"),
				},
				extra: []string{
					"dup." + tn("dupname") + " 5 IN A 172.0.0.20",
					"dup." + tn("dupname") + " 5 IN A 172.0.0.21",
					"172-0-0-22." + tn("dupname") + " 5 IN A 172.0.0.22",
				},
			},
			change: func() error { return esAPI.Delete(ctx, "dupname-x", metav1.DeleteOptions{}) },
			kind:   &discoveryv1.EndpointSlice{}, key: "testns/dupname-x", ready: absent,
			after: dnsCase{rcode: dns.RcodeNameError},
		},
		{
			name: "new slice of another Service leaves this one", qname: tn("svc1"), qtype: dns.TypeSRV,
			before: dnsCase{
				answer: []string{tn("svc1") + " 5 IN SRV 0 100 80 " + tn("svc1")},
				extra:  []string{tn("svc1") + " 5 IN A 10.0.0.11"},
			},
			change: func() error {
				_, err := esAPI.Create(ctx, endpointSlice("testns", "svc2", "svc2-x", v4, http, endpoint("172.0.0.77", "", isReady)), metav1.CreateOptions{})
				return err
			},
			kind: &discoveryv1.EndpointSlice{}, key: "testns/svc2-x", ready: present,
			after: dnsCase{
				answer: []string{tn("svc1") + " 5 IN SRV 0 100 80 " + tn("svc1")},
				extra:  []string{tn("svc1") + " 5 IN A 10.0.0.11"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(step string, c dnsCase) {
				t.Helper()
				c.name, c.qname, c.qtype = step, tt.qname, tt.qtype
				for range 2 { // built, then from the memo
					checkReply(t, fx.ask(t, tt.qname, tt.qtype, true, 0), c)
				}
			}
			check("before", tt.before)
			if err := tt.change(); err != nil {
				t.Fatal(err)
			}
			fx.untilStored(t, tt.kind, tt.key, tt.ready)
			check("after", tt.after)
		})
	}
}

// TestConsistentAnswers flips a Service between two endpoint sets while
// clients ask, through the handler the listeners use: every answer must be
// one whole set, never a mix, and the last set must show once the informer
// cache has it.
func TestConsistentAnswers(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	h := clusterdns.ListenerHandler(fx.srv)
	esAPI := fx.client.DiscoveryV1().EndpointSlices("testns")
	sets := [2][]string{bigAddrs(40)[:20], bigAddrs(40)[20:]}
	slice := func(i int) *discoveryv1.EndpointSlice {
		eps := readyEndpoints(20*i, 20)
		return endpointSlice("testns", "big", "big-1", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{httpSlicePort}, eps...)
	}
	want := [2][]string{sortedIPs(sets[0]), sortedIPs(sets[1])}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				w := newRecorder(true)
				h.ServeDNS(w, new(dns.Msg).SetQuestion(tn("big"), dns.TypeA))
				if w.err != nil {
					errs <- w.err.Error()
					return
				}
				// The fixture starts with 100 endpoints.
				got := addrsOf(w.msg)
				if len(got) != 100 && !slices.Equal(got, want[0]) && !slices.Equal(got, want[1]) {
					errs <- fmt.Sprintf("mixed answer of %d addresses: %v", len(got), got)
					return
				}
			}
		})
	}
	for i := range 20 {
		es := slice(i % 2)
		if i == 19 {
			es.Annotations = map[string]string{"test": "last"}
		}
		if _, err := esAPI.Update(t.Context(), es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The last update's mark, not its first address: every other update
	// had that address too, and an earlier one's arrival let the final
	// answer race the updates still coming (it failed once so in CI).
	fx.untilStored(t, &discoveryv1.EndpointSlice{}, "testns/big-1", func(obj any) bool {
		return obj != nil && obj.(*discoveryv1.EndpointSlice).Annotations["test"] == "last"
	})
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if diff := cmp.Diff(want[1], addrsOf(fx.ask(t, tn("big"), dns.TypeA, true, 0))); diff != "" {
		t.Errorf("final answer (-want +got):\n%s", diff)
	}
}

// TestCaseFromCache: a name asked in lower case first and then in other
// case gets its owners, and the zone in SRV targets and glue, as asked.
func TestCaseFromCache(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	upper := "_HTTP._TCP.SVC1.TESTNS.SVC.CLUSTER.LOCAL."
	runCases(t, fx, []dnsCase{
		{name: "lower A", qname: tn("svc1"), qtype: dns.TypeA, answer: []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
		{name: "upper A", qname: "SVC1.TESTNS.SVC.CLUSTER.LOCAL.", qtype: dns.TypeA,
			answer: []string{"SVC1.TESTNS.SVC.CLUSTER.LOCAL. 5 IN A 10.0.0.1"}},
		{name: "lower A again", qname: tn("svc1"), qtype: dns.TypeA, answer: []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
		{name: "lower SRV", qname: "_http._tcp." + tn("svc1"), qtype: dns.TypeSRV,
			answer: []string{"_http._tcp." + tn("svc1") + " 5 IN SRV 0 100 80 " + tn("svc1")},
			extra:  []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
		{name: "upper SRV", qname: upper, qtype: dns.TypeSRV,
			answer: []string{upper + " 5 IN SRV 0 100 80 svc1.testns.svc.CLUSTER.LOCAL."},
			extra:  []string{"svc1.testns.svc.CLUSTER.LOCAL. 5 IN A 10.0.0.1"}},
		{name: "upper NXDOMAIN", qname: "NOPE.TESTNS.SVC.CLUSTER.LOCAL.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			ns: []string{"CLUSTER.LOCAL. 5 IN SOA ns.dns.CLUSTER.LOCAL. hostmaster.CLUSTER.LOCAL. 0 7200 1800 86400 5"}},
		{name: "lower NXDOMAIN", qname: "nope.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	})
}

// TestMemoBounded: made-up names do not grow the memo past its bound.
func TestMemoBounded(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	const n = 20000
	for i := range n {
		fx.ask(t, fmt.Sprintf("made-up-%d.testns.svc.cluster.local.", i), dns.TypeA, false, 0)
	}
	if got, bound := clusterdns.MemoizedNames(fx.srv), clusterdns.MaxMemoized; got > bound || got == 0 {
		t.Errorf("memo holds %d names after %d made-up ones, want 1..%d", got, n, bound)
	}
}

// TestServersShareFactory: two Servers on one informer factory share the
// lookup indexes but each keeps its own answers current.
func TestServersShareFactory(t *testing.T) {
	api := labtest.NewAPI(t, referenceObjects()...)
	factory := api.Factory
	var srvs []*clusterdns.Server
	for range 2 {
		srv, err := clusterdns.New(factory, clusterdns.Config{})
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, srv)
	}
	changed := make(chan struct{}, 1)
	signal := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, err := factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { signal(obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	api.Start()
	ask := func(srv *clusterdns.Server) []string {
		return addrsOf(exchange(t, srv, new(dns.Msg).SetQuestion(tn("svc1"), dns.TypeA), true))
	}
	for i, srv := range srvs {
		if got := ask(srv); !slices.Equal(got, []string{"10.0.0.1"}) {
			t.Fatalf("server %d: %v", i, got)
		}
	}
	svc := clusterIPService("testns", "svc1", []string{"10.0.0.13"}, httpPort)
	if _, err := api.Client.CoreV1().Services("testns").Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lister := factory.Core().V1().Services().Lister()
	deadline := time.After(10 * time.Second)
	for {
		if s, err := lister.Services("testns").Get("svc1"); err == nil && s.Spec.ClusterIP == "10.0.0.13" {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("update not in the informer cache within 10s")
		}
	}
	for i, srv := range srvs {
		if got := ask(srv); !slices.Equal(got, []string{"10.0.0.13"}) {
			t.Errorf("server %d after the update: %v", i, got)
		}
	}
}
