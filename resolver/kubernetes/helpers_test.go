package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// waitTimeout bounds every wait for an event: generous, as the tests run
// under the race detector on a busy machine; nothing is timed.
const waitTimeout = 20 * time.Second

// ccEvent is one call the resolver made on its ClientConn.
type ccEvent struct {
	state *resolver.State
	err   error
}

// fakeCC is a resolver.ClientConn that records UpdateState and ReportError
// in order.
type fakeCC struct {
	resolver.ClientConn // nil: the resolver calls nothing else

	mu      sync.Mutex
	events  []ccEvent
	changed chan struct{} // closed and replaced on each event

	seen int // events a wait has passed; the test's goroutine only
}

func newFakeCC() *fakeCC { return &fakeCC{changed: make(chan struct{})} }

func (cc *fakeCC) add(e ccEvent) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.events = append(cc.events, e)
	close(cc.changed)
	cc.changed = make(chan struct{})
}

func (cc *fakeCC) UpdateState(s resolver.State) error {
	cc.add(ccEvent{state: &s})
	return nil
}

func (cc *fakeCC) ReportError(err error) { cc.add(ccEvent{err: err}) }

func (cc *fakeCC) ParseServiceConfig(string) *serviceconfig.ParseResult { return nil }

// snapshot returns the events so far and a channel closed at the next one.
func (cc *fakeCC) snapshot() ([]ccEvent, <-chan struct{}) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return slices.Clone(cc.events), cc.changed
}

// waitFor waits until cond holds for the events so far (it gets them all)
// and returns them; it fails t naming what after waitTimeout.
func (cc *fakeCC) waitFor(t testing.TB, what string, cond func([]ccEvent) bool) []ccEvent {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		evs, next := cc.snapshot()
		if cond(evs) {
			return evs
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; events:\n%s", what, describe(evs))
		}
	}
}

// waitState waits for a state with n addresses as the last event.
func (cc *fakeCC) waitState(t testing.TB, n int) []ccEvent {
	t.Helper()
	evs := cc.waitFor(t, fmt.Sprintf("a state with %d addresses", n), func(evs []ccEvent) bool {
		l := last(evs)
		return l.state != nil && len(l.state.Addresses) == n
	})
	cc.seen = len(evs)
	return evs
}

// waitError waits for an error containing each of parts among the events
// since the last wait returned, and returns the events up to it.
func (cc *fakeCC) waitError(t testing.TB, parts ...string) []ccEvent {
	t.Helper()
	at := -1
	evs := cc.waitFor(t, fmt.Sprintf("an error saying %q", parts), func(evs []ccEvent) bool {
		for i := cc.seen; i < len(evs); i++ {
			if e := evs[i].err; e != nil && containsAll(e.Error(), parts) {
				at = i
				return true
			}
		}
		return false
	})
	cc.seen = at + 1
	return evs[:at+1]
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func last(evs []ccEvent) ccEvent {
	if len(evs) == 0 {
		return ccEvent{}
	}
	return evs[len(evs)-1]
}

func describe(evs []ccEvent) string {
	var b strings.Builder
	for _, e := range evs {
		if e.err != nil {
			fmt.Fprintf(&b, "  error: %v\n", e.err)
		} else {
			fmt.Fprintf(&b, "  state: %d addresses\n", len(e.state.Addresses))
		}
	}
	return b.String()
}

// addrs returns a state's addresses, sorted.
func addrs(s *resolver.State) []string {
	var out []string
	for _, a := range s.Addresses {
		out = append(out, a.Addr)
	}
	slices.Sort(out)
	return out
}

// apiClient returns a fake clientset whose EndpointSlice watches signal
// on the returned channel once they are registered. Unlike an API server
// the fake does not replay changes made between a list and the watch that
// follows (a slice deleted then is never seen), so a test waits for the
// watch before it changes slices.
func apiClient() (*fake.Clientset, <-chan struct{}) { return signalWatches(fake.NewClientset()) }

func signalWatches(c *fake.Clientset) (*fake.Clientset, <-chan struct{}) {
	watched := make(chan struct{}, 100)
	c.PrependWatchReactor("endpointslices", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
		if err == nil {
			watched <- struct{}{}
		}
		return true, w, err
	})
	return c, watched
}

// waitWatch waits for a signal from apiClient's channel.
func waitWatch(t testing.TB, watched <-chan struct{}) {
	t.Helper()
	select {
	case <-watched:
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for the resolver's watch")
	}
}

// build starts a resolver for target on client with opts; the test's
// cleanup closes it.
func build(t testing.TB, client *fake.Clientset, target string, opts ...Option) (*fakeCC, resolver.Resolver) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(append([]Option{WithClient(client), WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	cc := newFakeCC()
	r, err := b.Build(resolver.Target{URL: *u}, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return cc, r
}

// slice is an EndpointSlice of Service svc in namespace shop with port
// "grpc" = port, and an endpoint per IP, ready.
func slice(svc, name string, port int32, ips ...string) *discoveryv1.EndpointSlice {
	grpcName := "grpc"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &grpcName, Port: &port}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: conditions(true, true, false)})
	}
	return s
}

func conditions(ready, serving, terminating bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
}

// ips returns n addresses 127.244.<from/250>.<from%250+1> onwards.
func ips(from, n int) []string {
	out := make([]string, n)
	for i := range n {
		k := from + i
		out[i] = fmt.Sprintf("127.244.%d.%d", k/250, k%250+1)
	}
	return out
}

func service(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471}}},
	}
}

func create(t testing.TB, c *fake.Clientset, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := c.DiscoveryV1().EndpointSlices(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func update(t testing.TB, c *fake.Clientset, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := c.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func remove(t testing.TB, c *fake.Clientset, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if err := c.DiscoveryV1().EndpointSlices(s.Namespace).Delete(context.Background(), s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
