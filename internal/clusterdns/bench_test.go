package clusterdns_test

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// BenchmarkServeDNS measures, in one run, queries per second of the
// Server for a ClusterIP A and a 100-endpoint headless A, and of two bare
// miekg handlers that write a fixed answer: one A record, and the same 100
// A records as the headless answer (compressed, as the Server sends
// them). The Server runs as its listeners run it (ListenerHandler, which
// pools replies and the slices of shuffled records), and through
// ServeDNS, which cannot pool them. All use the same packing
// writer over TCP (no truncation); the kinds take turns in chunks so that
// they share machine conditions. It reports each rate and the ratios
// clusterip/bare, clusterip-servedns/bare, headless100/bare,
// headless100/bare100 and headless100-servedns/bare100. ns/op covers one query of each kind.
func BenchmarkServeDNS(b *testing.B) {
	fx := newFixture(b, clusterdns.Config{}, referenceObjects()...)
	kinds := []struct {
		metric string
		h      dns.Handler
		q      *dns.Msg
	}{
		{"bare-q/s", bareHandler(tn("svc1"), 1, false), new(dns.Msg).SetQuestion(tn("svc1"), dns.TypeA)},
		{"clusterip-q/s", clusterdns.ListenerHandler(fx.srv), new(dns.Msg).SetQuestion(tn("svc1"), dns.TypeA)},
		{"clusterip-servedns-q/s", fx.srv, new(dns.Msg).SetQuestion(tn("svc1"), dns.TypeA)},
		{"bare100-q/s", bareHandler(tn("big"), 100, true), new(dns.Msg).SetQuestion(tn("big"), dns.TypeA)},
		{"headless100-q/s", clusterdns.ListenerHandler(fx.srv), new(dns.Msg).SetQuestion(tn("big"), dns.TypeA)},
		{"headless100-servedns-q/s", fx.srv, new(dns.Msg).SetQuestion(tn("big"), dns.TypeA)},
	}
	w := &packWriter{recorder: newRecorder(true), buf: make([]byte, dns.MaxMsgSize)}
	elapsed := make([]time.Duration, len(kinds))
	const chunk = 256
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		for k, kind := range kinds {
			start := time.Now()
			for range n {
				kind.h.ServeDNS(w, kind.q)
			}
			elapsed[k] += time.Since(start)
		}
	}
	b.StopTimer()
	if w.err != nil {
		b.Fatal(w.err)
	}
	if w.n < 100*16 {
		b.Fatalf("last reply was %d bytes: not the 100-address answer", w.n)
	}
	qps := make([]float64, len(kinds))
	for k, kind := range kinds {
		qps[k] = float64(b.N) / elapsed[k].Seconds()
		b.ReportMetric(qps[k], kind.metric)
	}
	b.ReportMetric(qps[1]/qps[0], "clusterip/bare")
	b.ReportMetric(qps[2]/qps[0], "clusterip-servedns/bare")
	b.ReportMetric(qps[4]/qps[0], "headless100/bare")
	b.ReportMetric(qps[4]/qps[3], "headless100/bare100")
	b.ReportMetric(qps[5]/qps[3], "headless100-servedns/bare100")
}

// bareHandler answers every query with n fixed A records owned by owner,
// authoritatively, as a minimal miekg server would.
func bareHandler(owner string, n int, compress bool) dns.Handler {
	rrs := make([]dns.RR, n)
	for i, ip := range bigAddrs(n) {
		rrs[i] = &dns.A{
			Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
			A:   net.ParseIP(ip).To4(),
		}
	}
	return dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		m.Compress = compress
		m.Answer = rrs
		w.WriteMsg(m)
	})
}

// packWriter packs replies into a reused buffer and drops them, as the
// miekg server does before writing to the socket.
type packWriter struct {
	*recorder
	buf []byte
	n   int
}

func (w *packWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.buf)
	if err != nil {
		w.err = err
		return err
	}
	w.n = len(b)
	return nil
}

// BenchmarkMemory1000Services reports the live heap for 1000 ClusterIP
// Services with one EndpointSlice of 3 ready endpoints each, in three
// layers: the informer caches of Services, EndpointSlices and Namespaces
// alone (informers-B, shared with the rest of the lab), what New adds to
// them, its indexes and change tracking (indexes-B), and the answer cache
// after one A and one SRV query per Service (cache-B). The fake
// clientset's own copy of the objects is excluded.
func BenchmarkMemory1000Services(b *testing.B) {
	const n = 1000
	for b.Loop() {
		b.StopTimer()
		client := fake.NewClientset(thousandServices(n)...)
		base := heapInUse()
		b.StartTimer()

		factory := informers.NewSharedInformerFactory(client, 0)
		factory.Core().V1().Services().Informer()
		factory.Core().V1().Namespaces().Informer()
		factory.Discovery().V1().EndpointSlices().Informer()
		stop := make(chan struct{})
		factory.Start(stop)
		factory.WaitForCacheSync(stop)
		informersB := heapInUse() - base

		srv, err := clusterdns.New(factory, clusterdns.Config{})
		if err != nil {
			b.Fatal(err)
		}
		factory.WaitForCacheSync(stop)
		indexesB := heapInUse() - base - informersB

		for i := range n {
			for _, q := range []*dns.Msg{
				new(dns.Msg).SetQuestion(fmt.Sprintf("svc-%d.bench.svc.cluster.local.", i), dns.TypeA),
				new(dns.Msg).SetQuestion(fmt.Sprintf("_http._tcp.svc-%d.bench.svc.cluster.local.", i), dns.TypeSRV),
			} {
				if r := exchange(b, srv, q, false); len(r.Answer) != 1 {
					b.Fatalf("%s: %s", q.Question[0].Name, describe(r))
				}
			}
		}
		cacheB := heapInUse() - base - informersB - indexesB
		b.ReportMetric(float64(informersB), "informers-B")
		b.ReportMetric(float64(indexesB), "indexes-B")
		b.ReportMetric(float64(cacheB), "cache-B")
		b.ReportMetric(float64(informersB+indexesB+cacheB), "total-B")
		close(stop)
		factory.Shutdown()
		runtime.KeepAlive(srv)
	}
}

func thousandServices(n int) []k8sruntime.Object {
	objs := []k8sruntime.Object{namespace("bench")}
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs,
			clusterIPService("bench", name, []string{fmt.Sprintf("10.1.%d.%d", i/256, i%256)}, httpPort),
			endpointSlice("bench", name, name+"-x", discoveryv1.AddressTypeIPv4,
				[]discoveryv1.EndpointPort{httpSlicePort}, readyEndpoints(3*i, 3)...))
	}
	return objs
}

// heapInUse returns the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
