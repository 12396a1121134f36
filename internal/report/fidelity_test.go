package report

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

// fidelityRun is a one-variant result whose "after" window has the given
// Jain's index and idle pods, and whose added pod got its first call
// rebalance seconds after it was ready (never when negative).
func fidelityRun(jain float64, idle int, rebalance float64) *Result {
	after := stats.WindowStats{Name: "after", From: 10, To: 30, Jain: jain, Idle: idle, ConnsPerClient: 1, Calls: 1000, AddedPods: 1, AddedShare: 0.1,
		Pods: []stats.PodStats{{Name: "p-1", Share: 0.6}, {Name: "p-2", Share: 0.3}, {Name: "p-3", Share: 0.1, Added: true}}}
	var rb stats.Rebalance
	rb.Pod = "p-3"
	if rebalance >= 0 {
		rb.After = &rebalance
	}
	return &Result{Scenario: "scale-out", Variants: []Variant{{
		Name: "clusterip", State: "done",
		Summary: stats.Summary{Windows: []stats.WindowStats{after}, Rebalance: []stats.Rebalance{rb},
			DNS: []stats.DNSQuery{{Type: "A", Rcode: "NOERROR", Answers: 2}}},
		Checks: []verdict.Check{{Pass: true}},
	}}}
}

func TestCompareDataplanes(t *testing.T) {
	tests := []struct {
		name    string
		a, b    *Result
		differs []string // figures that differ
	}{
		{name: "same", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.8, 0, 3)},
		{name: "within tolerance", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.7, 1, 4.5)},
		{name: "Jain apart", a: fidelityRun(0.9, 0, 3), b: fidelityRun(0.5, 0, 3), differs: []string{"Jain's index"}},
		{name: "idle pods apart", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.8, 2, 3), differs: []string{"idle pods"}},
		{name: "never rebalanced", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.8, 0, -1), differs: []string{"time to rebalance (median, s)"}},
		{name: "variant missing", a: fidelityRun(0.8, 0, 3), b: &Result{}, differs: []string{"ran"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := CompareDataplanes("pinlab", tt.a, "kube-proxy-nftables", tt.b)
			var got []string
			for _, r := range f.Rows {
				if r.Differs {
					got = append(got, r.Figure)
				}
			}
			if diff := cmp.Diff(tt.differs, got); diff != "" {
				t.Errorf("figures that differ (-want +got):\n%s", diff)
			}
			if f.Differences != len(got) {
				t.Errorf("Differences = %d, want %d", f.Differences, len(got))
			}
		})
	}
}

func TestFidelityTextGolden(t *testing.T) {
	b := fidelityRun(0.5, 2, -1)
	b.Variants[0].Overloaded = []verdict.Overload{{}}
	var buf bytes.Buffer
	if err := FidelityText(&buf, CompareDataplanes("pinlab", fidelityRun(0.8, 0, 3), "kube-proxy-nftables", b)); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "fidelity.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("fidelity report differs from %s (-want +got; rerun with -update if intended):\n%s", golden, diff)
	}
}
