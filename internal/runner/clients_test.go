package runner

import (
	"slices"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
)

// TestPhases: each client starts within its first interval, at a phase the
// seed repeats, and clients are not in step.
func TestPhases(t *testing.T) {
	cs := []plan.Client{{Name: "a-0", Rate: 10}, {Name: "a-1", Rate: 10}, {Name: "b-0", Rate: 1000}}
	p1, p2, other := phases(42, cs), phases(42, cs), phases(43, cs)
	if !slices.Equal(p1, p2) {
		t.Errorf("seed 42 gave %v, then %v", p1, p2)
	}
	if slices.Equal(p1, other) {
		t.Errorf("seeds 42 and 43 gave the same phases %v", p1)
	}
	for i, p := range p1 {
		if limit := time.Duration(float64(time.Second) / cs[i].Rate); p < 0 || p >= limit {
			t.Errorf("client %s: phase %v, want within [0, %v)", cs[i].Name, p, limit)
		}
	}
	if p1[0] == p1[1] {
		t.Errorf("two clients at the same phase %v", p1[0])
	}
}
