package l7proxy

import (
	"slices"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/podtest"
)

// benchCallers is the number of concurrent closed-loop callers sharing one
// channel in the throughput half of BenchmarkDirectVsProxy, as in the lab's
// BenchmarkVIPvsDirect.
const benchCallers = 32

// BenchmarkDirectVsProxy compares GetPrice on one gRPC channel dialled
// straight at a pod and through the proxy (round_robin, one endpoint), in
// the same run:
//
//   - calls: calls/s with 32 closed-loop callers, alternating chunks so
//     machine noise hits both alike; reports proxy/direct (Envoy manages
//     about 0.55 of direct in such comparisons).
//
//   - latency: one call every 500us alternating direct and proxied (1000
//     calls/s on each path) for 2s; reports both medians and the added p50.
//     It runs once whatever b.N is.
//
//     go test -run '^$' -bench DirectVsProxy -benchtime 40000x ./internal/l7proxy
func BenchmarkDirectVsProxy(b *testing.B) {
	l := newLab(b, Config{})
	bs := l.pods(1, 191)
	l.ready(bs...)
	direct, via := l.dial(bs[0].addr.String()), l.client()
	for _, c := range []pricingv1.PricingClient{direct, via} {
		if _, err := call(c, "warm-up"); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("calls", func(b *testing.B) {
		podtest.CompareThroughput(b, direct, via, "proxy", benchCallers)
	})
	b.Run("latency", func(b *testing.B) {
		const (
			every = 500 * time.Microsecond
			span  = 2 * time.Second
		)
		var lat [2][]time.Duration
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; i < int(span/every); i++ {
			<-tick.C
			c := [2]pricingv1.PricingClient{direct, via}[i%2]
			start := time.Now()
			if _, err := call(c, "sku"); err != nil {
				b.Fatal(err)
			}
			lat[i%2] = append(lat[i%2], time.Since(start))
		}
		d, v := median(lat[0]), median(lat[1])
		b.ReportMetric(float64(d.Microseconds()), "direct-p50-us")
		b.ReportMetric(float64(v.Microseconds()), "proxy-p50-us")
		b.ReportMetric(float64((v - d).Microseconds()), "added-p50-us")
		b.ReportMetric(0, "ns/op")
	})
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
