package load

import (
	"testing"
	"time"
)

func TestScheduleRateChange(t *testing.T) {
	base := time.Unix(1000, 0)
	tests := []struct {
		name string
		sent int64           // calls sent before the change
		rate float64         // new rate
		want []time.Duration // offsets of the next calls from base
	}{
		{name: "no change", sent: 3, rate: 10, want: []time.Duration{300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond}},
		{name: "faster", sent: 3, rate: 100, want: []time.Duration{210 * time.Millisecond, 220 * time.Millisecond, 230 * time.Millisecond}},
		{name: "slower", sent: 3, rate: 1, want: []time.Duration{1200 * time.Millisecond, 2200 * time.Millisecond, 3200 * time.Millisecond}},
		{name: "before the first call", sent: 0, rate: 100, want: []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := schedule{base: base, rate: 10, k: tt.sent}
			s.setRate(tt.rate)
			for i, want := range tt.want {
				if got := s.due().Sub(base); got != want {
					t.Errorf("call %d after the change due at +%v, want +%v", i, got, want)
				}
				s.k++
			}
		})
	}
}
