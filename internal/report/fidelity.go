package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/pinlab/pinlab/internal/stats"
)

// machineOverloaded reports whether v ran on an overloaded machine (the
// lab's own bursts aside).
func machineOverloaded(v Variant) bool {
	for _, o := range v.Overloaded {
		if !o.Burst {
			return true
		}
	}
	return false
}

// Fidelity is one scenario run on two dataplanes (`lab run
// --compare-dataplanes`: pinlab's kube-proxy and DNS, then the real
// kube-proxy and CoreDNS), compared figure by figure: per variant and
// window the figures the report rests on, each with a tolerance, and
// whether the two runs differ beyond it. Two runs on the same dataplane
// differ too (kube-proxy picks pods at random per connection, clients
// start at random phases), so the tolerances are what one dataplane's
// reruns stay within, not zero.
type Fidelity struct {
	Scenario string `json:"scenario"`
	// A and B name the dataplanes, A the reference (pinlab's).
	A string `json:"a"`
	B string `json:"b"`
	// Rows are in the order of A's variants, then each variant's windows,
	// then the variant-wide figures.
	Rows []FidelityRow `json:"rows"`
	// Differences counts the rows that differ beyond their tolerance,
	// except those that rest on chance (FidelityRow.Chance).
	Differences int `json:"differences"`
	// ChanceDifferences counts the rows that differ beyond their
	// tolerance where the figure rests on kube-proxy's random pick per
	// connection: two runs on one dataplane differ as much.
	ChanceDifferences int `json:"chance_differences"`
	// KnownDifferences counts the rows that differ in a way the two
	// dataplanes are known to differ (FidelityRow.Known).
	KnownDifferences int `json:"known_differences"`
	// Overloaded names the variants whose run on either dataplane the
	// overload detector marked: their figures are not evidence either way.
	Overloaded []string `json:"overloaded,omitempty"`
}

// FidelityRow is one figure of one variant (and window) on both
// dataplanes.
type FidelityRow struct {
	Variant string `json:"variant"`
	// Window is empty for figures of the whole run.
	Window string `json:"window,omitempty"`
	Figure string `json:"figure"`
	// A and B are the figure as printed ("-" where a run lacks it).
	A string `json:"a"`
	B string `json:"b"`
	// Tolerance says how far apart A and B may be ("±0.10", "same").
	Tolerance string `json:"tolerance"`
	Differs   bool   `json:"differs"`
	// Chance marks a figure that rests on kube-proxy's random pick of a
	// pod per connection (how calls spread over pods when clients reach
	// a ClusterIP): a difference there is not evidence against either
	// dataplane unless it recurs.
	Chance bool `json:"chance,omitempty"`
	// Known marks a difference the two dataplanes are built to show: the
	// error cause "reset" on pinlab's, where the real kube-proxy's has
	// "refused" (a client connecting through a ClusterIP to a pod that has
	// just exited: the kernel's DNAT makes the connect fail; pinlab's
	// user-space relay has accepted the connection before its dial to the
	// pod fails, and can only reset it).
	Known bool `json:"known,omitempty"`
}

// The tolerances of CompareDataplanes, on what one dataplane's reruns of
// a built-in stay within on 2 cores.
const (
	tolShare      = 0.10 // busiest pod's share, added pods' share
	tolJain       = 0.15
	tolIdle       = 1    // pods
	tolConns      = 0.5  // connections per client
	tolFailedFrac = 0.02 // failed calls over all calls
	tolErrSeconds = 1.0  // total seconds of error windows
	tolRebalance  = 2.0  // seconds, or a quarter of the larger, if more
	tolAnswers    = 0.5  // A records per DNS answer
)

// CompareDataplanes compares a and b, the results of one scenario on the
// dataplanes named aName and bName. Variants and windows are matched by
// name; one missing from either run is a difference.
func CompareDataplanes(aName string, a *Result, bName string, b *Result) *Fidelity {
	f := &Fidelity{Scenario: a.Scenario, A: aName, B: bName}
	for _, va := range a.Variants {
		vb, ok := variantNamed(b, va.Name)
		if !ok {
			f.add(FidelityRow{Variant: va.Name, Figure: "ran", A: va.State, B: "-", Tolerance: "same", Differs: true})
			continue
		}
		f.compareVariant(va, vb)
	}
	for _, vb := range b.Variants {
		if _, ok := variantNamed(a, vb.Name); !ok {
			f.add(FidelityRow{Variant: vb.Name, Figure: "ran", A: "-", B: vb.State, Tolerance: "same", Differs: true})
		}
	}
	return f
}

func (f *Fidelity) add(r FidelityRow) {
	f.Rows = append(f.Rows, r)
	switch {
	case r.Differs && r.Chance:
		f.ChanceDifferences++
	case r.Differs && r.Known:
		f.KnownDifferences++
	case r.Differs:
		f.Differences++
	}
}

func variantNamed(r *Result, name string) (Variant, bool) {
	for _, v := range r.Variants {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// compareVariant adds the rows of one variant that both runs have.
func (f *Fidelity) compareVariant(a, b Variant) {
	if a.Error != "" || b.Error != "" {
		// A variant that did not run on one dataplane (the real kube-proxy
		// refuses an ipvs plan) has no figures to compare.
		f.add(FidelityRow{Variant: a.Name, Figure: "ran", A: orNone(a.Error), B: orNone(b.Error), Tolerance: "same", Differs: a.Error != b.Error})
		return
	}
	if machineOverloaded(a) || machineOverloaded(b) {
		f.Overloaded = append(f.Overloaded, a.Name)
	}
	chance := viaClusterIP(a) || viaClusterIP(b)
	for _, wa := range a.Summary.Windows {
		wb, ok := windowNamed(b, wa.Name)
		if !ok {
			f.add(FidelityRow{Variant: a.Name, Window: wa.Name, Figure: "measured", A: "yes", B: "-", Tolerance: "same", Differs: true})
			continue
		}
		for _, r := range compareWindow(wa, wb) {
			r.Variant, r.Window = a.Name, wa.Name
			r.Chance = chance && spreadFigures[r.Figure]
			f.add(r)
		}
	}
	for _, r := range compareRun(a, b) {
		r.Variant = a.Name
		r.Chance = chance && spreadFigures[r.Figure]
		f.add(r)
	}
}

// spreadFigures are the figures of how calls spread over pods, which
// rest on kube-proxy's random picks when clients reach a ClusterIP (the
// added pods' share too: which pod a reconnecting client lands on is a
// pick, restart-client's 0.62 vs 0.50 was one; and so the time until an
// added pod gets its first call: in scale-out's clusterip-age, 4 clients
// reconnecting about every 10 s (MaxConnectionAge) over 10 pods leave a
// given added pod unpicked in a round with probability 0.9^4 = 0.66, and
// the median was 17.5 s on one dataplane, 30.1 s on the other).
var spreadFigures = map[string]bool{"busiest pod's share": true, "idle pods": true, "Jain's index": true, "added pods' share": true,
	"time to rebalance (median, s)": true}

// viaClusterIP says whether some client group of v reaches a ClusterIP.
func viaClusterIP(v Variant) bool {
	for _, g := range v.Groups {
		if g.ServiceKind == "ClusterIP" {
			return true
		}
	}
	return false
}

// compareWindow is a window's rows: how the calls spread and what failed.
func compareWindow(a, b stats.WindowStats) []FidelityRow {
	rows := []FidelityRow{
		within("busiest pod's share", busiest(a), busiest(b), tolShare, "%.2f"),
		within("idle pods", float64(a.Idle), float64(b.Idle), tolIdle, "%.0f"),
		within("Jain's index", a.Jain, b.Jain, tolJain, "%.2f"),
		within("connections per client", a.ConnsPerClient, b.ConnsPerClient, tolConns, "%.1f"),
	}
	if a.AddedPods > 0 || b.AddedPods > 0 {
		rows = append(rows, within("added pods' share", a.AddedShare, b.AddedShare, tolShare, "%.2f"))
	}
	rows = append(rows, within("failed share", failedShare(a), failedShare(b), tolFailedFrac, "%.3f"))
	return rows
}

// compareRun is a variant's rows over its whole run: error windows and
// their causes, time to rebalance, DNS answers per lookup, expectations.
func compareRun(a, b Variant) []FidelityRow {
	rows := []FidelityRow{
		within("seconds in error windows", errorSeconds(a.Summary), errorSeconds(b.Summary), tolErrSeconds, "%.1f"),
	}
	ca, cb := errorCauses(a.Summary), errorCauses(b.Summary)
	rows = append(rows, FidelityRow{Figure: "error causes", A: orNone(ca), B: orNone(cb), Tolerance: "same", Differs: ca != cb,
		Known: relayResets(a.Summary, b.Summary)})
	ra, okA := rebalanceMedian(a.Summary)
	rb, okB := rebalanceMedian(b.Summary)
	switch {
	case okA && okB:
		tol := max(tolRebalance, max(ra, rb)/4)
		rows = append(rows, FidelityRow{Figure: "time to rebalance (median, s)", A: fmt.Sprintf("%.1f", ra), B: fmt.Sprintf("%.1f", rb),
			Tolerance: fmt.Sprintf("±%.1f", tol), Differs: math.Abs(ra-rb) > tol})
	case okA != okB || len(a.Summary.Rebalance) > 0 || len(b.Summary.Rebalance) > 0:
		rows = append(rows, FidelityRow{Figure: "time to rebalance (median, s)", A: orNever(ra, okA), B: orNever(rb, okB), Tolerance: "same", Differs: okA != okB})
	}
	if da, okA := answersPerLookup(a.Summary); okA {
		db, okB := answersPerLookup(b.Summary)
		if okB {
			rows = append(rows, within("DNS answers per lookup", da, db, tolAnswers, "%.1f"))
		} else {
			rows = append(rows, FidelityRow{Figure: "DNS answers per lookup", A: fmt.Sprintf("%.1f", da), B: "-", Tolerance: "same", Differs: true})
		}
	}
	if len(a.Checks) > 0 || len(b.Checks) > 0 {
		pa, pb := passed(a), passed(b)
		rows = append(rows, FidelityRow{Figure: "expectations passed", A: pa, B: pb, Tolerance: "same", Differs: a.Failed() != b.Failed()})
	}
	return rows
}

// within is a row that differs when a and b are more than tol apart.
func within(figure string, a, b, tol float64, format string) FidelityRow {
	return FidelityRow{Figure: figure, A: fmt.Sprintf(format, a), B: fmt.Sprintf(format, b),
		Tolerance: "±" + fmt.Sprintf(format, tol), Differs: math.Abs(a-b) > tol+1e-9}
}

// busiest is the largest share of a window's calls that one pod took.
func busiest(w stats.WindowStats) float64 {
	most := 0.0
	for _, p := range w.Pods {
		most = max(most, p.Share)
	}
	return most
}

func failedShare(w stats.WindowStats) float64 {
	if w.Calls+w.Failed == 0 {
		return 0
	}
	return float64(w.Failed) / float64(w.Calls+w.Failed)
}

func errorSeconds(s stats.Summary) float64 {
	t := 0.0
	for _, w := range s.ErrorWindows {
		t += w.Seconds()
	}
	return t
}

// errorCauses lists the causes of a run's error windows, sorted.
func errorCauses(s stats.Summary) string {
	return strings.Join(slices.Sorted(maps.Keys(causeSet(s))), ", ")
}

// relayResets says whether a's error causes are b's but for "reset"
// where b has "refused" (FidelityRow.Known).
func relayResets(a, b stats.Summary) bool {
	ca, cb := causeSet(a), causeSet(b)
	if !ca["reset"] || !cb["refused"] {
		return false
	}
	delete(ca, "reset")
	ca["refused"] = true
	delete(cb, "reset")
	return maps.Equal(ca, cb)
}

// causeSet is the set of causes of s's error windows.
func causeSet(s stats.Summary) map[string]bool {
	set := map[string]bool{}
	for _, w := range s.ErrorWindows {
		for c := range w.ByCause {
			set[c] = true
		}
	}
	return set
}

// rebalanceMedian is the median time from an added pod's readiness to its
// first calls, over the added pods that got any.
func rebalanceMedian(s stats.Summary) (float64, bool) {
	var after []float64
	for _, r := range s.Rebalance {
		if r.After != nil {
			after = append(after, *r.After)
		}
	}
	if len(after) == 0 {
		return 0, false
	}
	sort.Float64s(after)
	return after[len(after)/2], true
}

// answersPerLookup is the mean number of answers of the clients'
// successful A lookups.
func answersPerLookup(s stats.Summary) (float64, bool) {
	n, sum := 0, 0
	for _, q := range s.DNS {
		if q.Type == "A" && q.Rcode == "NOERROR" {
			n++
			sum += q.Answers
		}
	}
	if n == 0 {
		return 0, false
	}
	return float64(sum) / float64(n), true
}

// passed is "N of M" expectations passed, with how many of the others an
// overloaded machine invalidated or the run skipped (neither counts as a
// failure, so such a row is not marked as a difference).
func passed(v Variant) string {
	out := fmt.Sprintf("%d of %d", len(v.Checks)-v.Failed()-v.Invalid()-v.Skipped(), len(v.Checks))
	if n := v.Invalid(); n > 0 {
		out += fmt.Sprintf(" (%d overloaded)", n)
	}
	if n := v.Skipped(); n > 0 {
		out += fmt.Sprintf(" (%d skipped)", n)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orNever(x float64, ok bool) string {
	if !ok {
		return "never"
	}
	return fmt.Sprintf("%.1f", x)
}

// FidelityText writes f as a table per variant, differences marked, then
// one line: how many figures differ beyond their tolerance.
func FidelityText(w io.Writer, f *Fidelity) error {
	p := &printer{w: w}
	p.f("pinlab lab run --compare-dataplanes: %s, %s vs %s\n", f.Scenario, f.A, f.B)
	variant := ""
	var tw *tabwriter.Writer
	flush := func() {
		if tw != nil && p.err == nil {
			p.err = tw.Flush()
		}
	}
	for _, r := range f.Rows {
		if r.Variant != variant {
			flush()
			variant = r.Variant
			p.f("\n== %s\n", variant)
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "   \t\tfigure\t%s\t%s\ttolerance\n", f.A, f.B)
		}
		where := "run"
		if r.Window != "" {
			where = r.Window
		}
		mark := "   "
		switch {
		case r.Differs && r.Chance:
			mark = " ~ "
		case r.Differs && r.Known:
			mark = " ≈ "
		case r.Differs:
			mark = " ≠ "
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", mark, where, r.Figure, r.A, r.B, r.Tolerance)
	}
	flush()
	if len(f.Overloaded) > 0 {
		p.f("\nOVERLOADED: the machine was overloaded during %s on one dataplane or both; their figures are not evidence either way\n", strings.Join(f.Overloaded, ", "))
	}
	if f.ChanceDifferences > 0 {
		p.f("\n%s of how calls spread over pods differ beyond tolerance where clients reach a ClusterIP (marked ~): kube-proxy picks a pod at random per connection, so two runs on one dataplane differ as much; rerun, or use more clients, before reading them as a difference\n", plural(f.ChanceDifferences, "figure"))
	}
	if f.KnownDifferences > 0 {
		p.f("\n%s differ as the dataplanes are known to (marked ≈): pinlab's ClusterIP relay resets a connection whose pod has just exited, where the kernel refuses the connect (docs/control-plane.md, \"Is pinlab's dataplane faithful?\")\n", plural(f.KnownDifferences, "figure"))
	}
	if f.Differences == 0 {
		if apart := f.ChanceDifferences + f.KnownDifferences; apart > 0 {
			p.f("\nthe dataplanes agree within tolerance on the other %d figures\n", len(f.Rows)-apart)
		} else {
			p.f("\nthe dataplanes agree within tolerance on all %d figures\n", len(f.Rows))
		}
	} else {
		p.f("\n%s of %d differ beyond tolerance (marked ≠)\n", plural(f.Differences, "figure"), len(f.Rows))
	}
	return p.err
}
