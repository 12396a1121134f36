package kubernetes

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/resolver"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var endpointSlicesGR = discoveryv1.Resource("endpointslices")

// TestManySlices: a Service of 250 pods over 3 slices gives 250 addresses;
// a change to one slice keeps the others' addresses (kuberesolver
// publishes only the slice that changed, its issue #66), and a change
// that does not touch addresses publishes nothing.
func TestManySlices(t *testing.T) {
	client, watched := apiClient()
	all := ips(0, 250)
	s1, s2, s3 := slice("pricing", "pricing-a", 8471, all[:100]...), slice("pricing", "pricing-b", 8471, all[100:200]...), slice("pricing", "pricing-c", 8471, all[200:]...)
	for _, s := range []*discoveryv1.EndpointSlice{s1, s2, s3} {
		create(t, client, s)
	}
	cc, _ := build(t, client, "kubernetes:///pricing.shop:grpc")
	evs := cc.waitState(t, 250)
	waitWatch(t, watched)
	if diff := cmp.Diff(sorted(all), addrs(last(evs).state)); diff != "" {
		t.Fatalf("addresses (-want +got):\n%s", diff)
	}
	before := len(evs)

	s2 = s2.DeepCopy()
	s2.Annotations = map[string]string{"touched": "yes"} // no address changes
	update(t, client, s2)
	s3 = s3.DeepCopy()
	s3.Endpoints = append(s3.Endpoints, discoveryv1.Endpoint{Addresses: ips(250, 1), Conditions: conditions(true, true, false)})
	update(t, client, s3)
	evs = cc.waitState(t, 251)
	if n := len(evs) - before; n != 1 {
		t.Errorf("%d updates after an annotation and an added endpoint, want 1 (the annotation alone must publish nothing):\n%s", n, describe(evs[before:]))
	}
	if diff := cmp.Diff(sorted(ips(0, 251)), addrs(last(evs).state)); diff != "" {
		t.Errorf("addresses after one slice changed (-want +got):\n%s", diff)
	}
}

// TestSliceDeleted: deleting one of two slices keeps the other's
// endpoints.
func TestSliceDeleted(t *testing.T) {
	client, watched := apiClient()
	a, b := slice("pricing", "pricing-a", 8471, ips(0, 3)...), slice("pricing", "pricing-b", 8471, ips(3, 2)...)
	create(t, client, a)
	create(t, client, b)
	cc, _ := build(t, client, "kubernetes://shop/pricing:grpc")
	cc.waitState(t, 5)
	waitWatch(t, watched)
	remove(t, client, a)
	evs := cc.waitState(t, 2)
	want := []string{"127.244.0.4:8471", "127.244.0.5:8471"}
	if diff := cmp.Diff(want, addrs(last(evs).state)); diff != "" {
		t.Errorf("addresses after a slice was deleted (-want +got):\n%s", diff)
	}
}

// TestEveryPodGone: when the last endpoint goes the channel gets an empty
// list and an error saying why (never the stale addresses), and the
// addresses again when pods return.
func TestEveryPodGone(t *testing.T) {
	client, watched := apiClient()
	s := slice("pricing", "pricing-a", 8471, ips(0, 2)...)
	create(t, client, s)
	cc, _ := build(t, client, "kubernetes:///pricing.shop:grpc")
	cc.waitState(t, 2)
	waitWatch(t, watched)

	gone := s.DeepCopy()
	gone.Endpoints[0].Conditions = conditions(false, true, true) // terminating, still serving
	gone.Endpoints[1].Conditions = conditions(false, false, false)
	update(t, client, gone)
	evs := cc.waitError(t, "Service shop/pricing has no ready endpoint", "of 2 endpoints in 1 EndpointSlices, 1 are terminating, 1 not ready")
	if st := evs[len(evs)-2].state; st == nil || len(st.Addresses) != 0 {
		t.Errorf("the error did not follow an empty state:\n%s", describe(evs))
	}

	empty := s.DeepCopy()
	empty.Endpoints = nil
	update(t, client, empty)
	cc.waitError(t, "Service shop/pricing has no endpoints (1 EndpointSlices, all empty)")

	update(t, client, slice("pricing", "pricing-a", 8471, ips(5, 3)...))
	evs = cc.waitState(t, 3)
	if diff := cmp.Diff(sorted(ips(5, 3)), addrs(last(evs).state)); diff != "" {
		t.Errorf("addresses after pods returned (-want +got):\n%s", diff)
	}
}

// TestConditions: ready endpoints are published (nil ready counts as
// ready, as discovery/v1 says); serving-terminating ones only with the
// fallback, and only while none is ready; the rest never.
func TestConditions(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name     string
		conds    []discoveryv1.EndpointConditions
		fallback bool
		want     []string // address indexes published
	}{
		{name: "ready", conds: []discoveryv1.EndpointConditions{conditions(true, true, false), conditions(false, false, false)}, want: []string{"1"}},
		{name: "nil ready counts as ready", conds: []discoveryv1.EndpointConditions{{}, {Ready: &no}}, want: []string{"1"}},
		{name: "terminating without fallback", conds: []discoveryv1.EndpointConditions{conditions(false, true, true)}, want: nil},
		{name: "terminating with fallback", conds: []discoveryv1.EndpointConditions{conditions(false, true, true), conditions(false, false, true)}, fallback: true, want: []string{"1"}},
		{name: "fallback unused while one is ready", conds: []discoveryv1.EndpointConditions{conditions(false, true, true), conditions(true, true, false)}, fallback: true, want: []string{"2"}},
		{name: "not serving never", conds: []discoveryv1.EndpointConditions{{Ready: &no, Serving: &no, Terminating: &yes}}, fallback: true, want: nil},
		{name: "nil serving counts as serving", conds: []discoveryv1.EndpointConditions{{Ready: &no, Terminating: &yes}}, fallback: true, want: []string{"1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := slice("pricing", "pricing-a", 8471)
			for i, c := range tt.conds {
				s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"127.244.0." + string(rune('1'+i))}, Conditions: c})
			}
			got, _ := merge([]*discoveryv1.EndpointSlice{s}, target{namespace: "shop", service: "pricing", port: "grpc"}, tt.fallback)
			var want []string
			for _, i := range tt.want {
				want = append(want, "127.244.0."+i+":8471")
			}
			if diff := cmp.Diff(want, entryAddrs(got)); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDuplicates: an address in two slices is published once, ready if
// either copy is.
func TestDuplicates(t *testing.T) {
	a := slice("pricing", "pricing-a", 8471, "127.244.0.1", "127.244.0.2")
	b := slice("pricing", "pricing-b", 8471, "127.244.0.2")
	a.Endpoints[1].Conditions = conditions(false, false, false)
	got, _ := merge([]*discoveryv1.EndpointSlice{a, b}, target{namespace: "shop", service: "pricing", port: "grpc"}, false)
	if diff := cmp.Diff([]string{"127.244.0.1:8471", "127.244.0.2:8471"}, entryAddrs(got)); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}

// TestPorts: a port name maps per slice (two templates with different
// numbers); a number is used as is; no port takes each slice's first.
func TestPorts(t *testing.T) {
	a, b := slice("pricing", "pricing-a", 8471, "127.244.0.1"), slice("pricing", "pricing-b", 9000, "127.244.0.2")
	tests := []struct {
		name string
		t    target
		want []string
	}{
		{name: "by name", t: target{port: "grpc"}, want: []string{"127.244.0.1:8471", "127.244.0.2:9000"}},
		{name: "by number", t: target{port: "7000", number: 7000}, want: []string{"127.244.0.1:7000", "127.244.0.2:7000"}},
		{name: "first port", t: target{}, want: []string{"127.244.0.1:8471", "127.244.0.2:9000"}},
		{name: "unknown name", t: target{port: "http"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := merge([]*discoveryv1.EndpointSlice{a, b}, tt.t, false)
			if diff := cmp.Diff(tt.want, entryAddrs(got)); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPortNotFound: a port name no slice has is reported as such.
func TestPortNotFound(t *testing.T) {
	client := fake.NewClientset()
	create(t, client, slice("pricing", "pricing-a", 8471, ips(0, 2)...))
	cc, _ := build(t, client, "kubernetes:///pricing.shop:http")
	cc.waitError(t, `no EndpointSlice of Service shop/pricing has a port named "http" (ports: [grpc])`)
}

// TestEndpointInfo: zone, node, hostname, hints and conditions ride on
// the endpoints and addresses.
func TestEndpointInfo(t *testing.T) {
	client := fake.NewClientset()
	s := slice("db", "db-a", 5432, "127.244.0.1")
	zone, node, host := "zone-a", "node-1", "db-0"
	s.Endpoints[0].Zone, s.Endpoints[0].NodeName, s.Endpoints[0].Hostname = &zone, &node, &host
	s.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}, ForNodes: []discoveryv1.ForNode{{Name: "node-1"}}}
	create(t, client, s)
	cc, _ := build(t, client, "kubernetes:///db.shop:grpc")
	st := last(cc.waitState(t, 1)).state
	want := EndpointInfo{Zone: "zone-a", NodeName: "node-1", Hostname: "db-0", ForZones: []string{"zone-a"}, ForNodes: []string{"node-1"}, Serving: true}
	for name, get := range map[string]func() (EndpointInfo, bool){
		"endpoint": func() (EndpointInfo, bool) { return InfoFromEndpoint(st.Endpoints[0]) },
		"address":  func() (EndpointInfo, bool) { return InfoFromAddress(st.Addresses[0]) },
	} {
		got, ok := get()
		if !ok {
			t.Errorf("%s: no EndpointInfo", name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: EndpointInfo (-want +got):\n%s", name, diff)
		}
	}
}

// TestMissingService: no slice at all is explained by looking the Service
// up: missing, then present without slices (found again on ResolveNow),
// then its slice arrives.
func TestMissingService(t *testing.T) {
	old := recheckInterval
	recheckInterval = 0
	t.Cleanup(func() { recheckInterval = old })
	client, watched := apiClient()
	cc, r := build(t, client, "kubernetes:///pricing.shop:grpc")
	evs := cc.waitError(t, "Service shop/pricing not found")
	waitWatch(t, watched)
	if st := evs[0].state; st == nil || len(st.Addresses) != 0 {
		t.Errorf("the error did not follow an empty state:\n%s", describe(evs))
	}
	if _, err := client.CoreV1().Services("shop").Create(context.Background(), service("pricing"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.ResolveNow(resolver.ResolveNowOptions{})
	cc.waitError(t, "Service shop/pricing has no EndpointSlices yet")
	create(t, client, slice("pricing", "pricing-a", 8471, ips(0, 1)...))
	cc.waitState(t, 1)
}

// TestForbidden: RBAC 403 on list is reported as such, with the
// permissions the resolver needs; when it is lifted the addresses come.
func TestForbidden(t *testing.T) {
	client := fake.NewClientset()
	create(t, client, slice("pricing", "pricing-a", 8471, ips(0, 2)...))
	var forbid atomic.Bool
	forbid.Store(true)
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if forbid.Load() {
			return true, nil, apierrors.NewForbidden(endpointSlicesGR, "", errors.New(`User "system:serviceaccount:shop:order" cannot list resource "endpointslices"`))
		}
		return false, nil, nil
	})
	cc, _ := build(t, client, "kubernetes:///pricing.shop:grpc")
	cc.waitError(t, "list EndpointSlices", "forbidden", "needs get, list and watch on endpointslices.discovery.k8s.io in namespace shop", "no addresses yet")
	forbid.Store(false) // client-go retries after its back-off (about 1s)
	cc.waitState(t, 2)
}

// TestWatchFailure: an error on an open watch and a failing re-watch are
// reported, the addresses kept and said to be possibly stale; a failing
// re-list (403) is reported too; when the API answers again the addresses
// are re-published.
func TestWatchFailure(t *testing.T) {
	client := fake.NewClientset()
	create(t, client, slice("pricing", "pricing-a", 8471, ips(0, 2)...))
	var failList, failWatch atomic.Bool
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failList.Load() {
			return true, nil, apierrors.NewForbidden(endpointSlicesGR, "", errors.New("RBAC: access denied"))
		}
		return false, nil, nil
	})
	watches := make(chan *watch.RaceFreeFakeWatcher, 100)
	client.PrependWatchReactor("endpointslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		if failWatch.Load() {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		w := watch.NewRaceFreeFake()
		watches <- w
		return true, w, nil
	})
	cc, _ := build(t, client, "kubernetes:///pricing.shop:grpc")
	cc.waitState(t, 2)
	var w *watch.RaceFreeFakeWatcher
	select {
	case w = <-watches:
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for the resolver's watch")
	}
	failWatch.Store(true)
	w.Error(&apierrors.NewInternalError(errors.New("etcd leader changed")).ErrStatus)
	cc.waitError(t, "watch EndpointSlices", "etcd leader changed", "keeping the 2 addresses of", "which may be stale")
	cc.waitError(t, "watch EndpointSlices", "etcd is down", "keeping the 2 addresses of")
	failList.Store(true) // the reflector re-lists after its back-off (about 1s)
	evs := cc.waitError(t, "list EndpointSlices", "forbidden", "RBAC: access denied", "keeping the 2 addresses")
	for _, e := range evs {
		if e.state != nil && len(e.state.Addresses) != 2 {
			t.Fatalf("the addresses changed during API failures:\n%s", describe(evs))
		}
	}
	failList.Store(false)
	failWatch.Store(false)
	cc.waitState(t, 2)
}

// TestClose: Close stops the informer and the loop; nothing is left
// running and the ClientConn is not called after.
func TestClose(t *testing.T) {
	client, watched := apiClient()
	create(t, client, slice("pricing", "pricing-a", 8471, ips(0, 2)...))
	cc, r := build(t, client, "kubernetes:///pricing.shop:grpc")
	cc.waitState(t, 2)
	waitWatch(t, watched)
	r.Close()
	n := len(must(cc.snapshot()))
	update(t, client, slice("pricing", "pricing-a", 8471, ips(0, 3)...))
	goleak.VerifyNone(t)
	if got := len(must(cc.snapshot())); got != n {
		t.Errorf("%d ClientConn calls after Close", got-n)
	}
}

func must[T, U any](v T, _ U) T { return v }

func sorted(ips []string) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip + ":8471"
	}
	slices.Sort(out)
	return out
}

func entryAddrs(es []entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.addr)
	}
	return out
}

// TestAPIRestart: an API server that restarts ends every watch and
// refuses new ones for a while; what changed meanwhile (a slice deleted,
// another's pods replaced) is in the re-list, and the channel gets exactly
// that, with no address of the old set left. Meanwhile the kept addresses
// are reported as possibly stale. (The real control-plane tier repeats
// this against a real API server.)
func TestAPIRestart(t *testing.T) {
	client := fake.NewClientset()
	a, b := slice("pricing", "pricing-a", 8471, ips(0, 3)...), slice("pricing", "pricing-b", 8471, ips(3, 2)...)
	create(t, client, a)
	create(t, client, b)
	var down atomic.Bool
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, apierrors.NewServiceUnavailable("apiserver is restarting")
		}
		return false, nil, nil
	})
	watches := make(chan watch.Interface, 100)
	client.PrependWatchReactor("endpointslices", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, apierrors.NewServiceUnavailable("apiserver is restarting")
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
		if err == nil {
			watches <- w
		}
		return true, w, err
	})
	cc, _ := build(t, client, "kubernetes:///pricing.shop:grpc")
	cc.waitState(t, 5)
	select {
	case w := <-watches:
		down.Store(true)
		w.Stop() // the restart ends the open watch
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for the resolver's watch")
	}
	cc.waitError(t, "apiserver is restarting", "keeping the 5 addresses of", "which may be stale")
	remove(t, client, a)
	update(t, client, slice("pricing", "pricing-b", 8471, ips(10, 2)...))
	down.Store(false) // the reflector re-lists after its back-off
	evs := cc.waitState(t, 2)
	if diff := cmp.Diff(sorted(ips(10, 2)), addrs(last(evs).state)); diff != "" {
		t.Errorf("addresses after the restart (-want +got):\n%s", diff)
	}
}
