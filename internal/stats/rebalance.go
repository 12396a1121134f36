package stats

import (
	"math"
	"time"
)

// Rebalance thresholds: a pod added during the run counts as rebalanced at
// its first call in the first RebalanceSpan in which it served at least
// RebalanceFraction of a fair share (1/n of the calls all pods served in that
// span, n being the pods Ready at the span's middle).
const (
	RebalanceFraction = 0.9
	RebalanceSpan     = time.Second
)

// Rebalance is how long one pod that turned Ready during the run took to get
// its fair share of calls.
type Rebalance struct {
	Pod     string `json:"pod"`
	ReadyAt Offset `json:"ready_at_s"`
	// After is the time from ReadyAt to the pod's first call in the first
	// span in which it got RebalanceFraction of a fair share, in seconds;
	// nil if that never happened while it was Ready.
	After *float64 `json:"after_s"`
	// Survived is true when the pod was still Ready at the end of the run.
	Survived bool `json:"survived"`
}

// rebalances computes Rebalance for every pod whose first Ready came after
// the start, up to end (the run's length).
func (r *Recorder) rebalances(end time.Duration) []Rebalance {
	type podInfo struct {
		served counts
		ready  [][2]time.Duration
	}
	infos := make([]podInfo, len(r.podOrder))
	for i, name := range r.podOrder {
		p := r.pods[name]
		infos[i] = podInfo{served: p.clientServed(nil), ready: p.readyIntervals(r.start)}
	}
	readyAt := func(ivs [][2]time.Duration, t time.Duration) bool {
		for _, iv := range ivs {
			if iv[0] <= t && t < iv[1] {
				return true
			}
		}
		return false
	}
	span := int(RebalanceSpan / Bucket)
	var out []Rebalance
	for i, name := range r.podOrder {
		at, ok := r.pods[name].firstReady(r.start)
		if !ok || at <= 0 {
			continue
		}
		me := infos[i]
		rb := Rebalance{Pod: name, ReadyAt: Offset(at), Survived: readyAt(me.ready, end-time.Nanosecond)}
		// The first Ready interval bounds the search.
		until := end
		for _, iv := range me.ready {
			if iv[0] <= at && at < iv[1] {
				until = min(until, iv[1])
			}
		}
		for b := bucketOf(at); time.Duration(b+span)*Bucket <= until; b++ {
			mid := time.Duration(b)*Bucket + RebalanceSpan/2
			var total int64
			n := 0
			for _, o := range infos {
				total += o.served.sum(b, b+span)
				if readyAt(o.ready, mid) {
					n++
				}
			}
			if total == 0 || n == 0 {
				continue
			}
			mine := me.served.sum(b, b+span)
			if float64(mine) >= RebalanceFraction*float64(total)/float64(n) {
				// Placed at the pod's first call in the span, not the span's
				// start: a span whose other buckets hold no calls at all
				// (every call failing) must not move it earlier.
				first := b
				for first < b+span && first < len(me.served) && me.served[first] == 0 {
					first++
				}
				v := secs(max(time.Duration(first)*Bucket-at, 0))
				rb.After = &v
				break
			}
		}
		out = append(out, rb)
	}
	return out
}

// RebalanceSeconds is the variant's time to rebalance: the longest After
// among pods that were still Ready at the end; +Inf if one of them never got
// its share, NaN if no pod was added during the run.
func RebalanceSeconds(rbs []Rebalance) float64 {
	worst, any := 0.0, false
	for _, rb := range rbs {
		if !rb.Survived {
			continue
		}
		any = true
		if rb.After == nil {
			return math.Inf(1)
		}
		worst = max(worst, *rb.After)
	}
	if !any {
		return math.NaN()
	}
	return worst
}
