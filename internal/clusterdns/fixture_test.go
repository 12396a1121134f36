package clusterdns_test

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/labtest"
)

// tn expands a Service-relative name in namespace testns of the default zone
// (the reference's "X.t").
func tn(name string) string { return name + ".testns.svc.cluster.local." }

// soaRR is the zone's SOA with T=5 and the serial zeroed, as rrStrings
// normalises it.
const soaRR = "cluster.local.\t5\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"

// fixture is a Server over a fake API whose informers have synced.
type fixture struct {
	srv     *clusterdns.Server
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	changed chan struct{} // gets a value after any informer event
}

// newFixture starts informers over objs and a Server on them, and stops
// everything when tb ends.
func newFixture(tb testing.TB, cfg clusterdns.Config, objs ...runtime.Object) *fixture {
	tb.Helper()
	api := labtest.NewAPI(tb, objs...)
	factory := api.Factory
	srv, err := clusterdns.New(factory, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	fx := &fixture{srv: srv, client: api.Client, factory: factory, changed: make(chan struct{}, 1)}
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { fx.signal() },
		UpdateFunc: func(any, any) { fx.signal() },
		DeleteFunc: func(any) { fx.signal() },
	}
	watched := []cache.SharedIndexInformer{
		factory.Discovery().V1().EndpointSlices().Informer(),
		factory.Core().V1().Services().Informer(),
		factory.Core().V1().Namespaces().Informer(),
	}
	if cfg.Pods == clusterdns.PodsVerified {
		watched = append(watched, factory.Core().V1().Pods().Informer())
	}
	for _, inf := range watched {
		if _, err := inf.AddEventHandler(notify); err != nil {
			tb.Fatalf("AddEventHandler: %v", err)
		}
	}
	api.Start()
	return fx
}

func (fx *fixture) signal() {
	select {
	case fx.changed <- struct{}{}:
	default:
	}
}

// untilStored waits until the informer cache of obj's kind holds obj as
// ready says (ready gets nil while the object is absent). It looks at the
// informer's store itself, the moment any reader can see the change: the
// answer cache must be current from then on, without retries.
func (fx *fixture) untilStored(tb testing.TB, kind runtime.Object, key string, ready func(obj any) bool) {
	tb.Helper()
	inf, err := fx.factory.ForResource(resourceOf(kind))
	if err != nil {
		tb.Fatal(err)
	}
	fx.waitFor(tb, func() string {
		obj, ok, err := inf.Informer().GetStore().GetByKey(key)
		if err != nil {
			return err.Error()
		}
		if !ok {
			obj = nil
		}
		if !ready(obj) {
			return fmt.Sprintf("%T %s not yet as expected in the informer cache", kind, key)
		}
		return ""
	})
}

// resourceOf maps the kinds the tests change to their API resources.
func resourceOf(kind runtime.Object) schema.GroupVersionResource {
	switch kind.(type) {
	case *corev1.Service:
		return corev1.SchemeGroupVersion.WithResource("services")
	case *corev1.Pod:
		return corev1.SchemeGroupVersion.WithResource("pods")
	case *corev1.Namespace:
		return corev1.SchemeGroupVersion.WithResource("namespaces")
	}
	return discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
}

func absent(obj any) bool  { return obj == nil }
func present(obj any) bool { return obj != nil }

// waitFor re-evaluates cond after every informer event until it returns
// "" or the deadline passes; it then fails with cond's last complaint.
func (fx *fixture) waitFor(tb testing.TB, cond func() string) {
	tb.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		msg := cond()
		if msg == "" {
			return
		}
		select {
		case <-fx.changed:
		case <-deadline.C:
			tb.Fatalf("condition not met within 10s: %s", msg)
		}
	}
}

// ask sends one question to the fixture's handler as if over UDP (or TCP),
// optionally with EDNS0 of the given size (0: none).
func (fx *fixture) ask(tb testing.TB, qname string, qtype uint16, tcp bool, edns uint16) *dns.Msg {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	if edns != 0 {
		m.SetEdns0(edns, false)
	}
	return exchange(tb, fx.srv, m, tcp)
}

// exchange runs h on m through a recorder and returns the reply after a
// pack/unpack round trip.
func exchange(tb testing.TB, h dns.Handler, m *dns.Msg, tcp bool) *dns.Msg {
	tb.Helper()
	w := newRecorder(tcp)
	h.ServeDNS(w, m)
	if w.err != nil {
		tb.Fatalf("reply to %v: %v", m.Question, w.err)
	}
	if w.msg == nil {
		tb.Fatalf("no reply to %v", m.Question)
	}
	return w.msg
}

// recorder is a dns.ResponseWriter that packs, unpacks and keeps the reply.
type recorder struct {
	remote net.Addr
	msg    *dns.Msg
	size   int
	writes int
	err    error
}

func newRecorder(tcp bool) *recorder {
	if tcp {
		return &recorder{remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}
	}
	return &recorder{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}
}

func (w *recorder) WriteMsg(m *dns.Msg) error {
	w.writes++
	b, err := m.Pack()
	if err != nil {
		w.err = fmt.Errorf("pack: %w", err)
		return w.err
	}
	got := new(dns.Msg)
	if err := got.Unpack(b); err != nil {
		w.err = fmt.Errorf("unpack: %w", err)
		return w.err
	}
	w.msg, w.size = got, len(b)
	return nil
}

func (w *recorder) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 96, 0, 10), Port: 53}
}
func (w *recorder) RemoteAddr() net.Addr        { return w.remote }
func (w *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (w *recorder) Close() error                { return nil }
func (w *recorder) TsigStatus() error           { return nil }
func (w *recorder) TsigTimersOnly(bool)         {}
func (w *recorder) Hijack()                     {}

// rrStrings renders rrs in presentation format, sorted, with SOA serials
// zeroed (they are the time of the last API change) and OPT left out.
func rrStrings(rrs []dns.RR) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		switch v := rr.(type) {
		case *dns.OPT:
			continue
		case *dns.SOA:
			c := *v
			c.Serial = 0
			rr = &c
		}
		out = append(out, rr.String())
	}
	slices.Sort(out)
	return out
}

// parseRRs turns test expectations into the same normal form.
func parseRRs(tb testing.TB, ss []string) []string {
	tb.Helper()
	rrs := make([]dns.RR, 0, len(ss))
	for _, s := range ss {
		rr, err := dns.NewRR(s)
		if err != nil {
			tb.Fatalf("bad expected RR %q: %v", s, err)
		}
		rrs = append(rrs, rr)
	}
	return rrStrings(rrs)
}

// --- Kubernetes objects ---

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func port(name string, proto corev1.Protocol, number int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: number}
}

var httpPort = port("http", corev1.ProtocolTCP, 80)

func clusterIPService(ns, name string, ips []string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips, Ports: ports,
		},
	}
}

func headlessService(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	svc := clusterIPService(ns, name, []string{corev1.ClusterIPNone}, ports...)
	return svc
}

func externalService(ns, name, target string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target},
	}
}

func slicePort(name string, proto corev1.Protocol, number int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &number}
}

var httpSlicePort = slicePort("http", corev1.ProtocolTCP, 80)

// endpoint is one address; ready nil leaves conditions.ready unset.
func endpoint(addr, hostname string, ready *bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if hostname != "" {
		ep.Hostname = &hostname
	}
	return ep
}

func ptr[T any](v T) *T { return &v }

var (
	isReady  = ptr(true)
	notReady = ptr(false)
)

func endpointSlice(ns, svc, name string, typ discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: typ,
		Ports:       ports,
		Endpoints:   eps,
	}
}

// readyEndpoints returns n ready IPv4 endpoints from 10.10.x.y, starting
// at the from-th (0-based) address.
func readyEndpoints(from, n int) []discoveryv1.Endpoint {
	eps := make([]discoveryv1.Endpoint, n)
	for i := range n {
		k := from + i + 1
		eps[i] = endpoint(fmt.Sprintf("10.10.%d.%d", k/256, k%256), "", isReady)
	}
	return eps
}

func bigAddrs(n int) []string {
	out := make([]string, n)
	for i, ep := range readyEndpoints(0, n) {
		out[i] = ep.Addresses[0]
	}
	return out
}

// referenceObjects is the fixture of the numbered conformance cases in
// handler_test.go, modelled on the one of CoreDNS's
// plugin/kubernetes/handler_test.go (APIConnServeTest).
func referenceObjects() []runtime.Object {
	const ns = "testns"
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	http := []discoveryv1.EndpointPort{httpSlicePort}
	return []runtime.Object{
		namespace(ns), namespace("kube-system"), namespace("default"),
		clusterIPService("kube-system", "kube-dns", []string{"10.96.0.10"},
			port("dns", corev1.ProtocolUDP, 53), port("dns-tcp", corev1.ProtocolTCP, 53)),

		clusterIPService(ns, "svc1", []string{"10.0.0.1"}, httpPort),
		endpointSlice(ns, "svc1", "svc1-abcde", v4, http, endpoint("172.0.0.1", "ep1a", isReady)),
		clusterIPService(ns, "svc2", []string{"10.0.0.2"}, httpPort, port("dns", corev1.ProtocolUDP, 53)),
		clusterIPService(ns, "svc6", []string{"1234:abcd::1"}, httpPort),
		clusterIPService(ns, "dual", []string{"10.0.0.3", "10::3"}, httpPort),
		clusterIPService(ns, "unnamed", []string{"10.0.0.5"}, port("", corev1.ProtocolTCP, 8080)),

		headlessService(ns, "hdls", httpPort),
		endpointSlice(ns, "hdls", "hdls-v4", v4, http,
			endpoint("172.0.0.2", "", isReady),
			endpoint("172.0.0.3", "", nil), // unset ready counts as ready
			endpoint("172.0.0.4", "web-0", isReady),
			endpoint("172.0.0.9", "web-9", notReady)),
		endpointSlice(ns, "hdls", "hdls-v6", v6, http, endpoint("5678:abcd::1", "", isReady)),

		headlessService(ns, "hdlsempty", httpPort),
		endpointSlice(ns, "hdlsempty", "hdlsempty-x", v4, http, endpoint("172.0.0.10", "", notReady)),

		func() runtime.Object {
			svc := headlessService(ns, "hdlspnr", httpPort)
			svc.Spec.PublishNotReadyAddresses = true
			return svc
		}(),
		// The EndpointSlice controller writes ready=true for a not-Ready pod
		// of a publishNotReadyAddresses Service; serving stays false.
		func() runtime.Object {
			ep := endpoint("172.0.0.11", "db-0", isReady)
			ep.Conditions.Serving = notReady
			return endpointSlice(ns, "hdlspnr", "hdlspnr-x", v4, http, ep)
		}(),

		externalService(ns, "ext", "ext.example.com"),
		externalService(ns, "ext2svc", "svc1.testns.svc.cluster.local"),

		headlessService(ns, "big", httpPort),
		endpointSlice(ns, "big", "big-1", v4, http, readyEndpoints(0, 100)...),

		pod(ns, "pod-a", corev1.PodRunning, "10.240.0.1"),
	}
}

// pod is a Pod in phase with the given IPs (the first is status.podIP).
func pod(ns, name string, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ips[0]},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// extraObjects are Services for rules that no numbered case covers.
func extraObjects() []runtime.Object {
	const ns = "testns"
	v4 := discoveryv1.AddressTypeIPv4
	http := []discoveryv1.EndpointPort{httpSlicePort}
	return []runtime.Object{
		// Two endpoints share a hostname (CoreDNS's "dup-name").
		headlessService(ns, "dupname", httpPort),
		endpointSlice(ns, "dupname", "dupname-x", v4, http,
			endpoint("172.0.0.20", "dup", isReady),
			endpoint("172.0.0.21", "dup", isReady),
			endpoint("172.0.0.22", "", isReady)),
		// A headless Service without ports: its slice has none either.
		headlessService(ns, "noports"),
		endpointSlice(ns, "noports", "noports-x", v4, nil, endpoint("172.0.0.30", "", isReady)),
		// A ClusterIP Service without ports (the API requires them; CoreDNS
		// copes with a port-less sentinel).
		clusterIPService(ns, "portless", []string{"10.0.0.6"}),
		// FQDN slices are not served.
		headlessService(ns, "fqdn", httpPort),
		endpointSlice(ns, "fqdn", "fqdn-x", discoveryv1.AddressTypeFQDN, http, endpoint("db.example.com", "", isReady)),
		// ExternalName oddities.
		externalService(ns, "loop1", "loop2.testns.svc.cluster.local"),
		externalService(ns, "loop2", "loop1.testns.svc.cluster.local"),
		externalService(ns, "extip", "192.0.2.1"),
		externalService(ns, "ext2hdls", "hdls.testns.svc.cluster.local."),
	}
}

// describe is a short description of a reply for failure messages.
func describe(m *dns.Msg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s tc=%v answer=%d", dns.RcodeToString[m.Rcode], m.Truncated, len(m.Answer))
	return b.String()
}

// newFactory is an informer factory over an empty fake clientset that is
// never started.
func newFactory() informers.SharedInformerFactory {
	return informers.NewSharedInformerFactory(fake.NewClientset(), 0)
}
