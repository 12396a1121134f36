package stats

import (
	"math"
	"testing"
	"time"
)

func TestFairness(t *testing.T) {
	tests := []struct {
		name    string
		xs      []float64
		jain    float64
		maxMean float64
		idle    int
	}{
		{name: "even", xs: []float64{5, 5, 5, 5}, jain: 1, maxMean: 1, idle: 0},
		{name: "one of four holds all", xs: []float64{8, 0, 0, 0}, jain: 0.25, maxMean: 4, idle: 3},
		{name: "seed 001 chart", xs: []float64{520, 470, 4, 3, 5, 2, 3, 2, 4, 1}, jain: 0.2092, maxMean: 5.128, idle: 8},
		{name: "two of ten equal", xs: []float64{1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, jain: 0.2, maxMean: 5, idle: 8},
		{name: "just above idle line", xs: []float64{10, 10, 10, 1.1}, jain: 0.8028, maxMean: 1.2862, idle: 0},
		{name: "all zero", xs: []float64{0, 0}, jain: 1, maxMean: 0, idle: 2},
		{name: "empty", xs: nil, jain: 0, maxMean: 0, idle: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := JainIndex(tt.xs); math.Abs(got-tt.jain) > 1e-3 {
				t.Errorf("JainIndex = %.4f, want %.4f", got, tt.jain)
			}
			if got := MaxOverMean(tt.xs); math.Abs(got-tt.maxMean) > 1e-2 {
				t.Errorf("MaxOverMean = %.4f, want %.4f", got, tt.maxMean)
			}
			if got := CountIdle(tt.xs); got != tt.idle {
				t.Errorf("CountIdle = %d, want %d", got, tt.idle)
			}
		})
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 10000
		got := float64(h.Quantile(q) / time.Microsecond)
		if math.Abs(got-want)/want > 0.02 {
			t.Errorf("Quantile(%v) = %vµs, want %vµs within 2%%", q, got, want)
		}
	}
	if h.Max() != 10*time.Millisecond {
		t.Errorf("Max = %v, want 10ms", h.Max())
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 {
		t.Error("empty histogram quantile is not 0")
	}
	var m Histogram
	m.Merge(&h)
	m.Merge(&h)
	if m.Count() != 20000 || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merged count %d p50 %v, want 20000 and %v", m.Count(), m.Quantile(0.5), h.Quantile(0.5))
	}
}

func TestBucketRoundTrip(t *testing.T) {
	for us := uint64(0); us < 1<<22; us = us*9/8 + 1 {
		mid := bucketMid(histBucket(us))
		if math.Abs(mid-float64(us)) > float64(us)/60+1 {
			t.Fatalf("value %dµs lands in bucket with midpoint %v", us, mid)
		}
	}
}
