package verdict

import (
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/lbpolicy"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// TestEjectedLine: the why-line blames outlier detection only for an xDS
// Service that has it (and can eject), under a policy that spreads calls,
// for a ready pod that was there all along and got no call while others
// did.
func TestEjectedLine(t *testing.T) {
	od := func(s string) *lbpolicy.OutlierDetection {
		o, err := lbpolicy.ParseOutlierDetection(s)
		if err != nil {
			t.Fatal(err)
		}
		return &o
	}
	ejecting := od(`{"failurePercentageEjection": {"threshold": 30}}`)
	pods := func(bad stats.PodStats) []stats.PodStats {
		return []stats.PodStats{bad, {Name: "good-1", State: stats.PodReady, Calls: 500}, {Name: "good-2", State: stats.PodReady, Calls: 500}}
	}
	idle := stats.PodStats{Name: "bad-0", State: stats.PodReady}
	tests := []struct {
		name   string
		target plan.Target
		policy string
		pods   []stats.PodStats
		want   string // "" for no line
	}{
		{"ejected", plan.Target{XDS: true, OutlierDetection: ejecting}, "round_robin", pods(idle), "bad-0 was ready yet served no call in window \"w\" while 2 pods served the rest: most likely outlier detection"},
		{"no outlier detection", plan.Target{XDS: true}, "round_robin", pods(idle), ""},
		{"enforcement 0", plan.Target{XDS: true, OutlierDetection: od(`{"failurePercentageEjection": {"enforcementPercentage": 0}}`)}, "round_robin", pods(idle), ""},
		{"not xDS", plan.Target{OutlierDetection: ejecting}, "round_robin", pods(idle), ""},
		{"pick_first", plan.Target{XDS: true, OutlierDetection: ejecting}, "pick_first", pods(idle), ""},
		{"ring_hash", plan.Target{XDS: true, OutlierDetection: ejecting}, "ring_hash", pods(idle), ""},
		{"an added pod", plan.Target{XDS: true, OutlierDetection: ejecting}, "round_robin", pods(stats.PodStats{Name: "bad-0", State: stats.PodReady, Added: true}), ""},
		{"not ready", plan.Target{XDS: true, OutlierDetection: ejecting}, "round_robin", pods(stats.PodStats{Name: "bad-0", State: stats.PodNotReady}), ""},
		{"served", plan.Target{XDS: true, OutlierDetection: ejecting}, "round_robin", pods(stats.PodStats{Name: "bad-0", State: stats.PodReady, Calls: 3}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			used := 0
			for _, p := range tt.pods {
				if p.Calls > 0 {
					used++
				}
			}
			f := facts{g: plan.Group{Name: "order", Target: tt.target, Policy: tt.policy}, last: stats.WindowStats{Name: "w", Pods: tt.pods}, usedPods: used}
			got := f.ejectedLine()
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("ejectedLine() = %q, want %q", got, tt.want)
			}
		})
	}
}
