package report

import (
	"bytes"
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
		Expectations: verdict.Expectations{Checks: []verdict.Check{{Pass: true}}},
	}}}
}

// failedRun is fidelityRun's variant failed with err.
func failedRun(err string) *Result {
	r := fidelityRun(0, 0, -1)
	r.Variants[0].State, r.Variants[0].Error = "failed", err
	return r
}

// viaCluster makes r's variant reach a ClusterIP.
func viaCluster(r *Result) *Result {
	r.Variants[0].Groups = []Group{{Name: "order", ServiceKind: "ClusterIP"}}
	return r
}

func TestCompareDataplanes(t *testing.T) {
	tests := []struct {
		name    string
		a, b    *Result
		differs []string // figures that differ
		chance  []string // figures that differ by chance
	}{
		{name: "same", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.8, 0, 3)},
		{name: "within tolerance", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.7, 1, 4.5)},
		{name: "Jain apart", a: fidelityRun(0.9, 0, 3), b: fidelityRun(0.5, 0, 3), differs: []string{"Jain's index"}},
		{name: "idle pods apart", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.8, 2, 3), differs: []string{"idle pods"}},
		{name: "never rebalanced", a: fidelityRun(0.8, 0, 3), b: fidelityRun(0.8, 0, -1), differs: []string{"time to rebalance (median, s)"}},
		{name: "variant missing", a: fidelityRun(0.8, 0, 3), b: &Result{}, differs: []string{"ran"}},
		{name: "refused on one dataplane", a: fidelityRun(0.8, 0, 3), b: failedRun("lab: proxy mode ipvs asked for"), differs: []string{"ran"}},
		{name: "Jain apart through a ClusterIP", a: viaCluster(fidelityRun(0.9, 0, 3)), b: viaCluster(fidelityRun(0.5, 0, 3)), chance: []string{"Jain's index"}},
		{name: "rebalance apart through a ClusterIP", a: viaCluster(fidelityRun(0.8, 0, 17.5)), b: viaCluster(fidelityRun(0.8, 0, 30.1)), chance: []string{"time to rebalance (median, s)"}},
		{name: "rebalance apart through a headless Service", a: fidelityRun(0.8, 0, 17.5), b: fidelityRun(0.8, 0, 30.1), differs: []string{"time to rebalance (median, s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := CompareDataplanes("pinlab", tt.a, "kube-proxy-nftables", tt.b)
			var got, chance []string
			for _, r := range f.Rows {
				switch {
				case r.Differs && r.Chance:
					chance = append(chance, r.Figure)
				case r.Differs:
					got = append(got, r.Figure)
				}
			}
			if diff := cmp.Diff(tt.differs, got); diff != "" {
				t.Errorf("figures that differ (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.chance, chance); diff != "" {
				t.Errorf("figures that differ by chance (-want +got):\n%s", diff)
			}
			if f.Differences != len(got) || f.ChanceDifferences != len(chance) {
				t.Errorf("Differences, ChanceDifferences = %d, %d; want %d, %d", f.Differences, f.ChanceDifferences, len(got), len(chance))
			}
		})
	}
}

func TestFidelityTextGolden(t *testing.T) {
	b := fidelityRun(0.5, 2, -1)
	b.Variants[0].Overloaded = []verdict.Overload{{}}
	headless := fidelityRun(0.8, 0, 3)
	headless.Variants[0].Name = "headless-rr"
	b.Variants = append(b.Variants, viaCluster(headless).Variants[0])
	a := fidelityRun(0.8, 0, 3)
	clusterip := viaCluster(fidelityRun(0.4, 0, 3))
	clusterip.Variants[0].Name = "headless-rr"
	a.Variants = append(a.Variants, clusterip.Variants[0])
	var buf bytes.Buffer
	if err := FidelityText(&buf, CompareDataplanes("pinlab", a, "kube-proxy-nftables", b)); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "fidelity.golden", buf.Bytes())
}

// TestFidelityExpectationsOverloaded: an expectation an overloaded machine
// invalidated is said so, and is not a difference.
func TestFidelityExpectationsOverloaded(t *testing.T) {
	a, b := fidelityRun(0.8, 0, 3), fidelityRun(0.8, 0, 3)
	a.Variants[0].Checks = append(a.Variants[0].Checks, verdict.Check{Invalid: true})
	b.Variants[0].Checks = append(b.Variants[0].Checks, verdict.Check{Pass: true})
	f := CompareDataplanes("pinlab", a, "kube-proxy-nftables", b)
	for _, r := range f.Rows {
		if r.Figure != "expectations passed" {
			continue
		}
		if r.A != "1 of 2 (1 overloaded)" || r.B != "2 of 2" || r.Differs {
			t.Errorf("expectations row %q vs %q, differs %v; want \"1 of 2 (1 overloaded)\" vs \"2 of 2\", not a difference", r.A, r.B, r.Differs)
		}
		return
	}
	t.Errorf("no expectations row in %+v", f.Rows)
}

// TestFidelityRelayResets: "reset" on pinlab's dataplane where the real
// one has "refused" is a known difference (not counted), any other cause
// apart is a difference.
func TestFidelityRelayResets(t *testing.T) {
	withCauses := func(causes ...string) *Result {
		r := fidelityRun(0.8, 0, 3)
		by := map[string]int64{}
		for _, c := range causes {
			by[c] = 10
		}
		r.Variants[0].Summary.ErrorWindows = []stats.ErrorWindow{{From: 1, To: 2, ByCause: by}}
		return r
	}
	tests := []struct {
		name         string
		a, b         *Result
		known, other int
	}{
		{name: "reset where the kernel refuses", a: withCauses("reset"), b: withCauses("refused"), known: 1},
		{name: "with a common cause", a: withCauses("deadline", "reset"), b: withCauses("deadline", "refused"), known: 1},
		{name: "refused where the kernel resets", a: withCauses("refused"), b: withCauses("reset"), other: 1},
		{name: "another cause", a: withCauses("reset"), b: withCauses("connect-timeout"), other: 1},
		{name: "same", a: withCauses("reset"), b: withCauses("reset")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := CompareDataplanes("pinlab", tt.a, "kube-proxy-nftables", tt.b)
			if f.KnownDifferences != tt.known || f.Differences != tt.other {
				t.Errorf("known, other differences = %d, %d; want %d, %d: %+v", f.KnownDifferences, f.Differences, tt.known, tt.other, f.Rows)
			}
		})
	}
}
