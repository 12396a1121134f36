package l7proxy

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
)

// The load-balancing policies a Proxy can use (Config.Policy), the names
// plan.ProxyPolicies lists.
const (
	// RoundRobin is Envoy's ROUND_ROBIN, its default lb_policy (unweighted
	// round_robin_lb.h): a per-cluster index that starts at a random value
	// and advances by one per pick, modulo the number of endpoints; the index
	// survives endpoint changes.
	RoundRobin = "round_robin"
	// LeastRequest is Envoy's LEAST_REQUEST with its default choice_count 2
	// (Istio's default since 1.14; least_request_lb.cc
	// unweightedHostPickNChoices): two endpoints drawn uniformly at random,
	// with replacement, and the one with fewer active requests wins; a tie
	// keeps the first. A request is active from its pick until its response
	// stream ends (Envoy's rq_active).
	LeastRequest = "least_request"
	// PeakEWMA is Linkerd's HTTP balancer: tower's p2c::Balance over
	// tower::load::PeakEwma with PendingUntilFirstData completion. Two
	// distinct endpoints drawn at random; each costs its peak-sensitive EWMA
	// latency times (pending+1), and the cheaper wins (a tie keeps the
	// first). See [EWMA] for the estimate.
	PeakEWMA = "peak_ewma"
)

// balancer picks the endpoint for one request attempt. eps is never empty
// and is sorted by address. Implementations are called concurrently from
// request goroutines.
type balancer interface {
	pick(eps []*endpoint, now time.Duration) *endpoint
}

func newBalancer(policy string, ewma EWMA) (balancer, error) {
	switch policy {
	case RoundRobin:
		rr := &roundRobin{}
		rr.next.Store(rand.Uint64()) // Envoy seeds the index randomly
		return rr, nil
	case LeastRequest:
		return leastRequest{}, nil
	case PeakEWMA:
		return peakEWMA{decay: float64(ewma.Decay)}, nil
	}
	return nil, fmt.Errorf("l7proxy: unknown policy %q (want one of %v)", policy, plan.ProxyPolicies)
}

type roundRobin struct{ next atomic.Uint64 }

func (r *roundRobin) pick(eps []*endpoint, _ time.Duration) *endpoint {
	return eps[(r.next.Add(1)-1)%uint64(len(eps))]
}

type leastRequest struct{}

func (leastRequest) pick(eps []*endpoint, _ time.Duration) *endpoint {
	a := eps[rand.IntN(len(eps))]
	b := eps[rand.IntN(len(eps))]
	if b.active.Load() < a.active.Load() {
		return b
	}
	return a
}

type peakEWMA struct{ decay float64 } // ns

func (p peakEWMA) pick(eps []*endpoint, now time.Duration) *endpoint {
	if len(eps) == 1 {
		return eps[0]
	}
	ai := rand.IntN(len(eps))
	bi := rand.IntN(len(eps) - 1)
	if bi >= ai {
		bi++
	}
	a, b := eps[ai], eps[bi]
	if a.cost(now, p.decay) <= b.cost(now, p.decay) {
		return a
	}
	return b
}
