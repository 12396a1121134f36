package load

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkScheduleLag measures how late the open-loop schedule launches
// calls at 2000 calls/s for one second, paced by a Scheduler and by a
// timer per client, and reports the lag's p50 and p99 in microseconds.
//
//	go test ./internal/load -run '^$' -bench ScheduleLag -benchtime 1x
func BenchmarkScheduleLag(b *testing.B) {
	for _, c := range []struct {
		name  string
		sched bool
	}{{"timer", false}, {"scheduler", true}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				lags := scheduleLags(c.sched, 2000, time.Second)
				slices.Sort(lags)
				b.ReportMetric(float64(lags[len(lags)/2].Microseconds()), "p50-lag-us")
				b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds()), "p99-lag-us")
			}
		})
	}
}

func scheduleLags(useScheduler bool, rate float64, d time.Duration) []time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sc *Scheduler
	var wg sync.WaitGroup
	if useScheduler {
		sc = NewScheduler()
		wg.Go(func() { sc.Run(ctx) })
	}
	var mu sync.Mutex
	var lags []time.Duration
	cctx, ccancel := context.WithTimeout(ctx, d)
	defer ccancel()
	pacing{rate: fixedRate(rate), launch: func(time.Time) {}, sent: func(_ time.Time, lag time.Duration) {
		mu.Lock()
		lags = append(lags, lag)
		mu.Unlock()
	}}.run(cctx, sc)
	cancel()
	wg.Wait()
	return lags
}
