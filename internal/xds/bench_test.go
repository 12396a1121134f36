package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"google.golang.org/grpc"
)

// BenchmarkEndpointUpdate measures how long an EndpointSlice change takes
// to reach grpc-go's xDS client: from the update of a slice that adds a
// pod (and drops the one the last round added) to the first call that pod
// answers, through the informer, a new snapshot, the ADS push, grpc-go's
// balancer and a new connection. It reports the median and the 99th
// percentile in ms (p50-ms, p99-ms) over b.N changes.
//
//	go test ./internal/xds -run '^$' -bench EndpointUpdate -benchtime 200x
func BenchmarkEndpointUpdate(b *testing.B) {
	f := newFleet(b, 4, nil)
	f.slice("pricing-a", readyEP("pricing-0"), readyEP("pricing-1"))
	c := f.dial("pricing.shop:8471")
	calls(b, c, 10)
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		added := []string{"pricing-2", "pricing-3"}[i%2]
		began := time.Now()
		f.slice("pricing-a", readyEP("pricing-0"), readyEP("pricing-1"), readyEP(added))
		if !answeredBy(b, c, added, 10*time.Second) {
			b.Fatalf("change %d: %s got no call within 10 s", i, added)
		}
		took = append(took, time.Since(began))
	}
	b.StopTimer()
	slices.Sort(took)
	ms := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

// answeredBy calls until pod answers one call, at most within.
func answeredBy(t testing.TB, c pricingv1.PricingClient, pod string, within time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	for ctx.Err() == nil {
		r, err := c.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "x"}, grpc.WaitForReady(true))
		if err == nil && r.GetPod() == pod {
			return true
		}
	}
	return false
}
