package l7proxy

import (
	"math"
	"sync"
	"time"
)

// EWMA tunes the latency estimate of the peak_ewma policy, tower's
// load::PeakEwma (itself from Finagle's PeakEwma) with Linkerd's constants
// (linkerd2-proxy EWMA_DEFAULT_RTT, EWMA_DECAY):
//
//   - A new endpoint starts at DefaultRTT.
//   - A sample above the estimate replaces it (the peak).
//   - A lower sample blends in: estimate = estimate*w + sample*(1-w), with
//     w = exp(-elapsed/Decay) and elapsed the time since the last update.
//   - Reading the cost first decays the estimate toward zero the same way (a
//     zero sample), as tower's RttEstimate::decay does, so an idle endpoint's
//     estimate falls and it gets tried again.
//
// A sample runs from the attempt's start to the first response body data, or
// to the end of a response without data (Linkerd's PendingUntilFirstData);
// such requests are the endpoint's "pending" ones. Failed dials add no sample.
type EWMA struct {
	// DefaultRTT is a new endpoint's estimate; zero means 30ms.
	DefaultRTT time.Duration
	// Decay is the time constant; zero means 10s.
	Decay time.Duration
}

// Linkerd's peak-EWMA constants, the defaults of EWMA.
const (
	DefaultEWMARTT   = 30 * time.Millisecond
	DefaultEWMADecay = 10 * time.Second
)

func (e EWMA) withDefaults() EWMA {
	if e.DefaultRTT <= 0 {
		e.DefaultRTT = DefaultEWMARTT
	}
	if e.Decay <= 0 {
		e.Decay = DefaultEWMADecay
	}
	return e
}

// rttEstimate is one endpoint's peak-EWMA latency, in nanoseconds, last
// updated at `at` (a monotonic offset from the Proxy's start).
type rttEstimate struct {
	mu  sync.Mutex
	rtt float64
	at  time.Duration
}

// update folds a sample of rtt nanoseconds taken at now into the estimate
// and returns it, as tower's RttEstimate::update.
func (e *rttEstimate) update(rtt float64, now time.Duration, decay float64) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rtt < rtt {
		e.rtt = rtt
	} else {
		elapsed := max(float64(now-e.at), 0)
		w := math.Exp(-elapsed / decay)
		e.rtt = e.rtt*w + rtt*(1-w)
	}
	e.at = max(e.at, now)
	return e.rtt
}
