package clusterdns_test

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// BenchmarkServeDNS measures queries per second of the handler for a
// ClusterIP A and a 100-endpoint headless A against a bare miekg handler
// that writes a fixed one-record answer, all through the same packing
// writer, and reports the rates and their ratios. ns/op covers one query
// of each kind.
func BenchmarkServeDNS(b *testing.B) {
	fx := newFixture(b, clusterdns.Config{}, referenceObjects()...)
	fixed := &dns.A{
		Hdr: dns.RR_Header{Name: tn("svc1"), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
		A:   net.IPv4(10, 0, 0, 1),
	}
	bare := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		m.Answer = []dns.RR{fixed}
		w.WriteMsg(m)
	})
	kinds := []struct {
		metric string
		h      dns.Handler
		q      *dns.Msg
	}{
		{"bare-q/s", bare, new(dns.Msg).SetQuestion(tn("svc1"), dns.TypeA)},
		{"clusterip-q/s", fx.srv, new(dns.Msg).SetQuestion(tn("svc1"), dns.TypeA)},
		{"headless100-q/s", fx.srv, new(dns.Msg).SetQuestion(tn("big"), dns.TypeA)},
	}
	w := &packWriter{recorder: newRecorder(true), buf: make([]byte, dns.MaxMsgSize)}
	var elapsed [3]time.Duration
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
	if w.n < 100*12 {
		b.Fatalf("last reply was %d bytes: not the 100-address answer", w.n)
	}
	var qps [3]float64
	for k, kind := range kinds {
		qps[k] = float64(b.N) / elapsed[k].Seconds()
		b.ReportMetric(qps[k], kind.metric)
	}
	b.ReportMetric(qps[1]/qps[0], "clusterip/bare")
	b.ReportMetric(qps[2]/qps[0], "headless100/bare")
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
