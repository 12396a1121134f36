package pod

import (
	"sync"
	"time"

	"google.golang.org/grpc/orca"
)

// meterBucket is how much of the last second one of loadMeter's buckets
// holds.
const meterBucket = 100 * time.Millisecond

// meterBuckets make up the last second.
const meterBuckets = int64(time.Second / meterBucket)

// loadMeter measures a pod's load over the last second for its ORCA
// reports (gRFC A51): the calls it answered per second (QPS), those it
// failed (EPS), and the time
// they spent being served per second (application utilization: 1.0 is
// one call always in service). A pod whose calls take 4 times as long
// reports 4 times the utilization at the same rate, which is what
// weighted_round_robin weighs endpoints by (qps / utilization, gRFC A58).
// Safe for concurrent use.
type loadMeter struct {
	now     func() time.Time
	mu      sync.Mutex
	buckets [meterBuckets]struct {
		at     int64 // which meterBucket since the Unix epoch
		calls  int
		failed int
		busy   time.Duration
	}
}

var _ orca.ServerMetricsProvider = (*loadMeter)(nil)

func newLoadMeter(now func() time.Time) *loadMeter { return &loadMeter{now: now} }

// served counts a call that began at began and ends now, failed or not.
func (m *loadMeter) served(began time.Time, failed bool) {
	now := m.now()
	at := now.UnixNano() / int64(meterBucket)
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &m.buckets[at%meterBuckets]
	if b.at != at {
		b.at, b.calls, b.failed, b.busy = at, 0, 0, 0
	}
	b.calls++
	if failed {
		b.failed++
	}
	b.busy += now.Sub(began)
}

// load is the last second's calls per second, failed calls per second
// (EPS, which weighted_round_robin's errorUtilizationPenalty weighs) and
// application utilization.
func (m *loadMeter) load() (qps, eps, utilization float64) {
	at := m.now().UnixNano() / int64(meterBucket)
	m.mu.Lock()
	defer m.mu.Unlock()
	var calls, failed int
	var busy time.Duration
	for _, b := range m.buckets {
		if b.at > at-meterBuckets && b.at <= at {
			calls += b.calls
			failed += b.failed
			busy += b.busy
		}
	}
	return float64(calls), float64(failed), busy.Seconds()
}

// ServerMetrics is the pod's out-of-band load report.
func (m *loadMeter) ServerMetrics() *orca.ServerMetrics {
	qps, eps, util := m.load()
	return &orca.ServerMetrics{
		CPUUtilization: -1, MemUtilization: -1,
		AppUtilization: util, QPS: qps, EPS: eps,
		Utilization: map[string]float64{}, RequestCost: map[string]float64{}, NamedMetrics: map[string]float64{},
	}
}
