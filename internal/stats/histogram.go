package stats

import (
	"math/bits"
	"time"
)

// Histogram counts durations in log-linear buckets with at most ~1.6%
// relative error (64 linear sub-buckets per power of two, microsecond unit),
// like HdrHistogram with two significant digits. The zero value is empty and
// ready to use. It is not safe for concurrent use.
type Histogram struct {
	counts []uint64
	n      uint64
	max    time.Duration
}

const subBits = 6
const subCount = 1 << subBits

func histBucket(us uint64) int {
	if us < subCount {
		return int(us)
	}
	e := bits.Len64(us) - subBits
	m := us >> e
	return subCount + (e-1)*(subCount/2) + int(m-subCount/2)
}

// bucketMid returns a representative value (the midpoint) of bucket i in µs.
func bucketMid(i int) float64 {
	if i < subCount {
		return float64(i)
	}
	e := (i-subCount)/(subCount/2) + 1
	m := uint64((i-subCount)%(subCount/2) + subCount/2)
	lo := m << e
	return float64(lo) + float64(uint64(1)<<e)/2
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := histBucket(uint64(d / time.Microsecond))
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	if d > h.max {
		h.max = d
	}
}

// Merge adds every count of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]uint64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	if o.max > h.max {
		h.max = o.max
	}
}

// Count returns the number of recorded durations.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest recorded duration, exactly.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the duration below which a fraction q (0..1) of the
// recorded durations fall, to the histogram's precision; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			d := time.Duration(bucketMid(i) * float64(time.Microsecond))
			if d > h.max {
				d = h.max
			}
			return d
		}
	}
	return h.max
}
