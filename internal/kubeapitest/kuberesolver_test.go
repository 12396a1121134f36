package kubeapitest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/kubeapitest"
	"github.com/pinlab/pinlab/internal/labtest"
	ours "github.com/pinlab/pinlab/resolver/kubernetes"
	kuberesolver "github.com/sercand/kuberesolver/v6"
	"google.golang.org/grpc/resolver"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// waitTimeout bounds each wait for an event; generous, as the tests run
// under the race detector on a busy machine. Nothing is timed.
const waitTimeout = 20 * time.Second

// TestKuberesolverFailureModes runs resolver/kubernetes and
// sercand/kuberesolver v6.0.1 side by side on the same EndpointSlices (a
// fake clientset; kuberesolver, which speaks plain HTTP to the API, reads
// them through kubeapitest.Server) and checks, for each failure the issue
// names, that ours gets it right and that kuberesolver still gets it
// wrong, as its issue #66 and its code say: it publishes only the slice an
// event carries, drops updates without a ready address, publishes a deleted
// slice's addresses, and only logs API errors. Each kuberesolver check
// waits for an event that shows kuberesolver has handled the change (an
// update it makes anyway, a later marker slice, a retried request), so a
// slow machine cannot make it look wrong. If a kuberesolver release fixes
// one, this test fails and the README's comparison must be updated.
func TestKuberesolverFailureModes(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, e *env) (oursWrong, theirsWrong string)
	}{
		{name: "250 endpoints over 3 slices, then one slice changes", run: manySlices},
		{name: "one of 2 slices deleted", run: sliceDeleted},
		{name: "every endpoint gone", run: everyEndpointGone},
		{name: "RBAC 403 on list and watch", run: forbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			oursWrong, theirsWrong := tt.run(t, e)
			if oursWrong != "" {
				t.Errorf("resolver/kubernetes: %s\nevents:\n%s", oursWrong, e.ours.describe())
			}
			if theirsWrong == "" {
				t.Errorf("kuberesolver got this right; the README says it does not\nevents:\n%s", e.theirs.describe())
			} else {
				t.Logf("kuberesolver, as expected: %s", theirsWrong)
			}
		})
	}
}

func manySlices(t *testing.T, e *env) (string, string) {
	all := ips(0, 250)
	a, b, c := slice("pricing-a", all[:100]...), slice("pricing-b", all[100:200]...), slice("pricing-c", all[200:]...)
	e.create(t, a, b, c)
	e.start(t)
	oursWrong := e.ours.wantAddrs(all)
	// kuberesolver's watch starts with an ADDED event per slice, each
	// published alone.
	e.theirs.waitFor(t, "3 updates", func(evs []event) bool { return updates(evs) == 3 })
	theirsWrong := e.theirs.addrsWrong(all)

	c = c.DeepCopy()
	c.Endpoints = append(c.Endpoints, endpoint(ips(250, 1)[0], true))
	e.update(t, c)
	if w := e.ours.wantAddrs(ips(0, 251)); w != "" && oursWrong == "" {
		oursWrong = "after one slice changed: " + w
	}
	e.theirs.waitFor(t, "a 4th update", func(evs []event) bool { return updates(evs) == 4 })
	if w := e.theirs.addrsWrong(ips(0, 251)); w != "" {
		theirsWrong += "; after one slice changed: " + w
	}
	return oursWrong, theirsWrong
}

func sliceDeleted(t *testing.T, e *env) (string, string) {
	a, b := slice("pricing-a", ips(0, 3)...), slice("pricing-b", ips(3, 2)...)
	e.create(t, a, b)
	e.start(t)
	e.ours.mustAddrs(t, ips(0, 5))
	e.theirs.waitFor(t, "2 updates", func(evs []event) bool { return updates(evs) == 2 })
	e.delete(t, a)
	oursWrong := e.ours.wantAddrs(ips(3, 2))
	// kuberesolver handles a DELETED event as any other: it publishes the
	// deleted slice's addresses.
	e.theirs.waitFor(t, "an update after the delete", func(evs []event) bool { return updates(evs) == 3 })
	return oursWrong, e.theirs.addrsWrong(ips(3, 2))
}

func everyEndpointGone(t *testing.T, e *env) (string, string) {
	s := slice("pricing-a", ips(0, 2)...)
	e.create(t, s)
	e.start(t)
	e.ours.mustAddrs(t, ips(0, 2))
	e.theirs.mustAddrs(t, ips(0, 2))
	from := len(e.theirs.snapshot())

	gone := s.DeepCopy()
	for i := range gone.Endpoints {
		gone.Endpoints[i] = endpoint(gone.Endpoints[i].Addresses[0], false)
	}
	e.update(t, gone)
	oursWrong := ""
	if !e.ours.wait(func(evs []event) bool { return emptied(evs) && reported(evs, "has no ready endpoint") }) {
		oursWrong = "no empty state and error after every endpoint went unready"
	}
	// A marker slice of another address: once kuberesolver publishes it,
	// it has handled the update before.
	e.create(t, slice("pricing-z", "10.9.9.9"))
	evs := e.theirs.waitFor(t, "the marker slice", func(evs []event) bool {
		l := last(evs)
		return l.state != nil && slices.Contains(l.addrs(), "10.9.9.9:8471")
	})
	theirsWrong := ""
	if between := evs[from : len(evs)-1]; !emptied(between) && !reported(between, "") {
		theirsWrong = fmt.Sprintf("kept the 2 unready addresses %v, reported nothing", last(evs[:from]).addrs())
	}
	return oursWrong, theirsWrong
}

func forbidden(t *testing.T, e *env) (string, string) {
	e.create(t, slice("pricing-a", ips(0, 2)...))
	e.start(t)
	e.ours.mustAddrs(t, ips(0, 2))
	e.theirs.mustAddrs(t, ips(0, 2))

	e.forbid.Store(true)
	e.stopWatches() // ours sees its watch end and re-watches: 403
	e.srv.Fail(http.StatusForbidden)
	oursWrong := ""
	if !e.ours.wait(func(evs []event) bool { return reported(evs, "forbidden") }) {
		oursWrong = "no error reported for a 403"
	}
	// kuberesolver retries a failed watch after 1s, then 2s: two 403s mean
	// it had handled the first.
	deadline := time.Now().Add(waitTimeout)
	for e.srv.Answered(http.StatusForbidden) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("kuberesolver made %d requests answered 403 in %v, want 2", e.srv.Answered(http.StatusForbidden), waitTimeout)
		}
		e.theirs.waitChange(50 * time.Millisecond) // it never calls cc here: a poll
	}
	theirsWrong := ""
	if !reported(e.theirs.snapshot(), "") {
		theirsWrong = fmt.Sprintf("%d requests answered 403, no error reported (only logged through grpclog)", e.srv.Answered(http.StatusForbidden))
	}
	return oursWrong, theirsWrong
}

// env is one Service's slices in a fake clientset, served to kuberesolver
// over HTTP, with a recorder per resolver.
type env struct {
	api          *fake.Clientset
	srv          *kubeapitest.Server
	ours, theirs *recorder
	forbid       atomic.Bool // list and watch of the fake answer 403

	mu      sync.Mutex
	watches []watch.Interface // ours's, through the fake
}

func newEnv(t *testing.T) *env {
	e := &env{api: fake.NewClientset(), ours: newRecorder(), theirs: newRecorder()}
	gr := discoveryv1.Resource("endpointslices")
	deny := apierrors.NewForbidden(gr, "", errors.New(`User "system:serviceaccount:shop:order" cannot list resource "endpointslices"`))
	e.api.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if e.forbid.Load() {
			return true, nil, deny
		}
		return false, nil, nil
	})
	e.api.PrependWatchReactor("endpointslices", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if e.forbid.Load() {
			return true, nil, deny
		}
		w, err := e.api.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
		if err == nil {
			e.mu.Lock()
			e.watches = append(e.watches, w)
			e.mu.Unlock()
		}
		return true, w, err
	})
	e.srv = kubeapitest.NewServer(t, e.api)
	return e
}

// start builds both resolvers for kubernetes:///pricing.shop:grpc; the
// test's cleanup closes them.
func (e *env) start(t *testing.T) { e.startTarget(t, "kubernetes:///pricing.shop:grpc") }

// startTarget builds both resolvers for target (outside a pod: a target
// without a namespace is in "default" for both); the test's cleanup closes
// them.
func (e *env) startTarget(t *testing.T, target string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rt := resolver.Target{URL: *u}
	for _, b := range []struct {
		b  resolver.Builder
		cc *recorder
	}{
		{ours.NewBuilder(ours.WithClient(e.api), ours.WithLogger(slog.New(slog.DiscardHandler))), e.ours},
		{kuberesolver.NewBuilder(kuberesolver.NewInsecureK8sClient(e.srv.URL), "kubernetes"), e.theirs},
	} {
		r, err := b.b.Build(rt, b.cc, resolver.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
	}
}

// stopWatches ends the watches ours has open, as an API server ends them
// when it restarts.
func (e *env) stopWatches() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.watches {
		w.Stop()
	}
	e.watches = nil
}

func (e *env) create(t *testing.T, ss ...*discoveryv1.EndpointSlice) {
	t.Helper()
	for _, s := range ss {
		if _, err := e.api.DiscoveryV1().EndpointSlices("shop").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) update(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := e.api.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) delete(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if err := e.api.DiscoveryV1().EndpointSlices("shop").Delete(context.Background(), s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// slice is an EndpointSlice of Service pricing in namespace shop, port
// "grpc" = 8471, one ready endpoint per IP.
func slice(name string, ips ...string) *discoveryv1.EndpointSlice {
	port, portName := int32(8471), "grpc"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "pricing"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, endpoint(ip, true))
	}
	return s
}

func endpoint(ip string, ready bool) discoveryv1.Endpoint {
	serving, terminating := ready, false
	return discoveryv1.Endpoint{Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}}
}

// ips returns n addresses 10.0.<k/250>.<k%250+1> from k = from.
func ips(from, n int) []string {
	out := make([]string, n)
	for i := range n {
		k := from + i
		out[i] = fmt.Sprintf("10.0.%d.%d", k/250, k%250+1)
	}
	return out
}

// event is one call a resolver made on its ClientConn.
type event struct {
	state *resolver.State
	err   error
}

func (e event) addrs() []string {
	if e.state == nil {
		return nil
	}
	var out []string
	for _, a := range e.state.Addresses {
		out = append(out, a.Addr)
	}
	slices.Sort(out)
	return out
}

func last(evs []event) event {
	if len(evs) == 0 {
		return event{}
	}
	return evs[len(evs)-1]
}

func updates(evs []event) int {
	n := 0
	for _, e := range evs {
		if e.state != nil {
			n++
		}
	}
	return n
}

// emptied reports an empty state among evs.
func emptied(evs []event) bool {
	return slices.ContainsFunc(evs, func(e event) bool { return e.state != nil && len(e.state.Addresses) == 0 })
}

// reported reports an error containing part among evs.
func reported(evs []event, part string) bool {
	return slices.ContainsFunc(evs, func(e event) bool { return e.err != nil && strings.Contains(e.err.Error(), part) })
}

// recorder is a resolver.ClientConn that records UpdateState and
// ReportError in order. Safe for concurrent use.
type recorder struct {
	resolver.ClientConn // nil: neither resolver calls anything else

	mu      sync.Mutex
	events  []event
	changed chan struct{} // closed and replaced at each event
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) UpdateState(s resolver.State) error {
	r.add(event{state: &s})
	return nil
}

func (r *recorder) ReportError(err error) { r.add(event{err: err}) }

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// waitChange waits for the next event, at most d.
func (r *recorder) waitChange(d time.Duration) {
	r.mu.Lock()
	next := r.changed
	r.mu.Unlock()
	select {
	case <-next:
	case <-time.After(d):
	}
}

// wait waits up to waitTimeout for cond to hold over the events so far.
func (r *recorder) wait(cond func([]event) bool) bool {
	deadline := time.Now().Add(waitTimeout)
	for {
		r.mu.Lock()
		evs, next := slices.Clone(r.events), r.changed
		r.mu.Unlock()
		if cond(evs) {
			return true
		}
		select {
		case <-next:
		case <-time.After(time.Until(deadline)):
			return false
		}
	}
}

// waitFor is wait, failing t when cond never holds; it returns the events.
func (r *recorder) waitFor(t *testing.T, what string, cond func([]event) bool) []event {
	t.Helper()
	if !r.wait(cond) {
		t.Fatalf("timed out waiting for %s; events:\n%s", what, r.describe())
	}
	return r.snapshot()
}

// wantAddrs waits for a last state of the addresses of ips on port 8471;
// "" when it came, else what the last state was.
func (r *recorder) wantAddrs(ips []string) string {
	want := withPort(ips)
	if r.wait(func(evs []event) bool { return cmp.Equal(want, last(evs).addrs()) }) {
		return ""
	}
	return r.addrsWrong(ips)
}

// mustAddrs is wantAddrs, failing t when the addresses do not come.
func (r *recorder) mustAddrs(t *testing.T, ips []string) {
	t.Helper()
	if w := r.wantAddrs(ips); w != "" {
		t.Fatalf("waiting for %d addresses: %s; events:\n%s", len(ips), w, r.describe())
	}
}

// addrsWrong says how the last state differs from ips on port 8471; ""
// when it does not.
func (r *recorder) addrsWrong(ips []string) string {
	got := last(r.snapshot()).addrs()
	if cmp.Equal(withPort(ips), got) {
		return ""
	}
	missing, extra := 0, 0
	for _, a := range withPort(ips) {
		if !slices.Contains(got, a) {
			missing++
		}
	}
	for _, a := range got {
		if !slices.Contains(withPort(ips), a) {
			extra++
		}
	}
	return fmt.Sprintf("published %d addresses, want %d (%d missing, %d that should be gone)", len(got), len(ips), missing, extra)
}

func withPort(ips []string) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip + ":8471"
	}
	slices.Sort(out)
	return out
}

func (r *recorder) describe() string {
	var b strings.Builder
	for _, e := range r.snapshot() {
		if e.err != nil {
			fmt.Fprintf(&b, "  error: %v\n", e.err)
		} else {
			fmt.Fprintf(&b, "  state: %d addresses\n", len(e.state.Addresses))
		}
	}
	return b.String()
}

// TestKuberesolverTargets: for each of kuberesolver's target forms, both
// resolvers watch the same Service in the same namespace and publish the
// same address (the port by name, by number, or each slice's first).
// Service pricing has a slice in namespaces shop and default (a target
// without a namespace outside a pod), ports grpc = 8471 and metrics =
// 9090.
func TestKuberesolverTargets(t *testing.T) {
	for _, tt := range []struct {
		target  string
		ns      string
		address string
	}{
		{target: "kubernetes:///pricing.shop:grpc", ns: "shop", address: "10.0.0.1:8471"},
		{target: "kubernetes:///pricing.shop.svc.cluster.local:metrics", ns: "shop", address: "10.0.0.1:9090"},
		{target: "kubernetes://shop/pricing:grpc", ns: "shop", address: "10.0.0.1:8471"},
		{target: "kubernetes://shop/pricing:9999", ns: "shop", address: "10.0.0.1:9999"},
		{target: "kubernetes://pricing.shop:8471", ns: "shop", address: "10.0.0.1:8471"},
		{target: "kubernetes:///pricing.shop", ns: "shop", address: "10.0.0.1:8471"},
		{target: "kubernetes:///pricing:grpc", ns: "default", address: "10.1.0.1:8471"},
	} {
		t.Run(tt.target, func(t *testing.T) {
			e := newEnv(t)
			for ns, ip := range map[string]string{"shop": "10.0.0.1", "default": "10.1.0.1"} {
				s := slice("pricing-a", ip)
				s.Namespace = ns
				metrics, port := "metrics", int32(9090)
				s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &metrics, Port: &port})
				if _, err := e.api.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			e.startTarget(t, tt.target)
			want := []string{tt.address}
			for name, r := range map[string]*recorder{"resolver/kubernetes": e.ours, "kuberesolver": e.theirs} {
				if !r.wait(func(evs []event) bool { return cmp.Equal(want, last(evs).addrs()) }) {
					t.Errorf("%s: last addresses %v, want %v", name, last(r.snapshot()).addrs(), want)
				}
			}
			sel := discoveryv1.LabelServiceName + "=pricing"
			if reqs := e.srv.Requests(); !slices.Contains(reqs, kubeapitest.Request{Watch: true, Namespace: tt.ns, LabelSelector: sel}) {
				t.Errorf("kuberesolver's requests %+v, want a watch of %s in %s", reqs, sel, tt.ns)
			}
			// The addresses can come from the reflector's list before its
			// watch starts: wait for the watch.
			watched := func() bool {
				return slices.ContainsFunc(e.api.Actions(), func(a k8stesting.Action) bool {
					w, ok := a.(k8stesting.WatchActionImpl)
					// client-go's reflector asks for bookmarks; the server's
					// relay for kuberesolver does not.
					return ok && w.Namespace == tt.ns && w.Resource.Resource == "endpointslices" && w.ListOptions.LabelSelector == sel &&
						w.ListOptions.AllowWatchBookmarks
				})
			}
			labtest.WaitFor(t, 10*time.Second, fmt.Sprintf("resolver/kubernetes to watch %s in %s", sel, tt.ns), watched)
		})
	}
}
