//go:build linux

package kubernetes

import (
	"fmt"
	"hash/maphash"
	"net/url"
	"runtime"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/resolver"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// bigService creates a Service of 1000 endpoints in 10 slices on client
// and returns the slices.
func bigService(t testing.TB, client *fake.Clientset) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for i := range 10 {
		s := slice("pricing", fmt.Sprintf("pricing-%d", i), 8471, ips(i*100, 100)...)
		create(t, client, s)
		out = append(out, s)
	}
	return out
}

// TestThousandEndpoints: 1000 endpoints in 10 slices give 1000 addresses;
// one endpoint going unready removes exactly it.
func TestThousandEndpoints(t *testing.T) {
	client, watched := apiClient()
	eps := bigService(t, client)
	cc, _ := build(t, client, "kubernetes:///pricing.shop:grpc")
	cc.waitState(t, 1000)
	waitWatch(t, watched)
	s := eps[7].DeepCopy()
	s.Endpoints[42].Conditions = conditions(false, false, false)
	update(t, client, s)
	evs := cc.waitState(t, 999)
	var want []string
	for i, ip := range ips(0, 1000) {
		if i != 742 {
			want = append(want, ip)
		}
	}
	if diff := cmp.Diff(sorted(want), addrs(last(evs).state)); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
}

// benchCC is a resolver.ClientConn that hands each state's size to the
// benchmark and keeps nothing.
type benchCC struct {
	fakeCC
	sizes chan int
}

func (cc *benchCC) UpdateState(s resolver.State) error {
	cc.sizes <- len(s.Addresses)
	return nil
}

func (cc *benchCC) ReportError(error) {}

// updater makes one change to a 1000-endpoint Service per step, an
// endpoint going unready, then ready again (each slice in turn), and waits until the resolver has
// given the channel the new list.
type updater struct {
	tb     testing.TB
	client *fake.Clientset
	cc     *benchCC
	eps    []*discoveryv1.EndpointSlice
	n      int
	heap   uint64 // bytes the resolver holds with 1000 endpoints
}

func newUpdater(b *testing.B) *updater {
	// The simple fake: NewClientset's field manager costs more per update
	// than the resolver does.
	client, watched := signalWatches(fake.NewSimpleClientset()) //nolint:staticcheck // see above
	u := &updater{tb: b, client: client, eps: bigService(b, client), cc: &benchCC{sizes: make(chan int, 16)}}
	before := heapInUse()
	u2, _ := url.Parse("kubernetes:///pricing.shop:grpc")
	r, err := NewBuilder(WithClient(client), WithLogger(nil)).Build(resolver.Target{URL: *u2}, u.cc, resolver.BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	u.wait(1000)
	waitWatch(b, watched)
	u.heap = heapInUse() - before
	return u
}

func (u *updater) wait(want int) {
	timeout := time.After(waitTimeout)
	for {
		select {
		case n := <-u.cc.sizes:
			if n == want {
				return
			}
		case <-timeout:
			u.tb.Fatalf("timed out waiting for %d addresses", want)
		}
	}
}

func (u *updater) step() {
	i := u.n / 2 % len(u.eps) // each slice in turn, twice
	s := u.eps[i].DeepCopy()
	want := 1000
	if u.n%2 == 0 {
		s.Endpoints[0].Conditions = conditions(false, false, false)
		want = 999
	} else {
		s.Endpoints[0].Conditions = conditions(true, true, false)
	}
	u.eps[i] = s
	update(u.tb, u.client, s)
	u.wait(want)
	u.n++
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUpdate1000: the time from a slice change (an API write to the
// in-memory fake) to the channel having the new list of 1000 addresses,
// and the process's CPU per change (the fake API's share included).
func BenchmarkUpdate1000(b *testing.B) {
	u := newUpdater(b)
	cpu := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		u.step()
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e3, "cpu-us/op")
	b.ReportMetric(float64(u.heap)/1024, "resolver-heap-KiB")
}

// BenchmarkAt100PerSecond: 100 changes a second to a Service of 1000
// endpoints; the process's CPU use (the fake API's share included) as a
// percentage of one core.
func BenchmarkAt100PerSecond(b *testing.B) {
	u := newUpdater(b)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	cpu, start := cpuTime(), time.Now()
	b.ResetTimer()
	for b.Loop() {
		<-tick.C
		u.step()
	}
	b.ReportMetric(100*float64(cpuTime()-cpu)/float64(time.Since(start)), "cpu-%")
}

// BenchmarkMerge1000: the resolver's own work per change: merging 10
// slices of 100 endpoints and building the channel's state.
func BenchmarkMerge1000(b *testing.B) {
	var eps []*discoveryv1.EndpointSlice
	for i := range 10 {
		eps = append(eps, slice("pricing", fmt.Sprintf("pricing-%d", i), 8471, ips(i*100, 100)...))
	}
	r := &kubeResolver{seed: maphash.MakeSeed()}
	t := target{namespace: "shop", service: "pricing", port: "grpc"}
	for b.Loop() {
		es, _ := merge(eps, t, false)
		if st := r.state(es); len(st.Addresses) != 1000 {
			b.Fatalf("%d addresses", len(st.Addresses))
		}
	}
}
