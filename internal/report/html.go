package report

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"

	"github.com/pinlab/pinlab/internal/chart"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

// HTML writes the report as one self-contained page: per variant the
// per-pod calls/s timeline, a per-pod bar chart per window, failed calls
// with the error windows, connections and DNS lookups, and the time to
// rebalance; then the variants side by side on the same axes, the
// expectations and why lines. The chart library and the data are inlined
// (the data as JSON in a script element) and a Content-Security-Policy
// forbids every fetch, so the page opens offline and reaches no network.
// It renders r as its JSON (-o json) keeps it, times to the millisecond,
// so that a result read back from the JSON (pinlab report RESULT.json
// --html) renders the same page, byte for byte: rounding a time such as
// 9.0496 s to 9.0 s on the page, but to 9.050 s in the JSON and then to
// 9.1 s, would not.
func HTML(w io.Writer, r *Result) error {
	kept, err := asSaved(r)
	if err != nil {
		return err
	}
	return page.Execute(w, newView(kept))
}

// asSaved returns r as JSON writes it and ReadJSON reads it back.
func asSaved(r *Result) (*Result, error) {
	var buf bytes.Buffer
	if err := JSON(&buf, r); err != nil {
		return nil, fmt.Errorf("report: html: %w", err)
	}
	var kept Result
	if err := json.Unmarshal(buf.Bytes(), &kept); err != nil {
		return nil, fmt.Errorf("report: html: %w", err)
	}
	return &kept, nil
}

//go:embed report.tmpl
var reportTemplate string

var page = template.Must(template.Must(template.New("chart").Parse(chart.Figure)).New("report").
	Funcs(template.FuncMap{"sub": func(a, b int) int { return a - b }}).Parse(reportTemplate))

// view is what the report's template renders.
type view struct {
	R          *Result
	Style      template.CSS
	Script     template.JS
	Data       pageData
	Overloaded []overloadLine
	Verdict    string
	Header     []term
	Variants   []variantView
	Compare    comparisonCharts
	CmpHeader  []string
	CmpRows    [][]string
	RunHeader  []string
	RunRows    [][]string
	Checks     []checkRow
	Why        []whyLine
}

// term is a line of a description list.
type term struct{ Name, Value string }

type variantView struct {
	Variant
	Anchor     string
	Setup      []term
	Note       string // interrupted or failed
	Charts     variantCharts
	Windows    []windowView
	ErrorLines []string
	Rebalance  string
	Why        []whyLine
	Checks     []checkRow
}

type windowView struct {
	Chart chart.Chart
	Line  string
}

type checkRow struct {
	Variant, Name, Verdict, Where, Shown, Bound, Note string
}

type whyLine struct{ Label, Line string }

func newView(r *Result) view {
	vcs, cc := charts(r)
	v := view{
		R: r, Style: chart.Style(), Script: chart.Script(), Data: pageData{Charts: all(vcs, cc)},
		Overloaded: overloadLines(r), Verdict: verdictLine(r), Compare: cc,
		CmpHeader: comparisonHeader, RunHeader: runHeader,
	}
	how := runHow(r)
	v.Header = []term{
		{"source", r.Source},
		{"run", fmt.Sprintf("%gs per variant, %d variant(s) %s, seed %d", r.Duration, len(r.Variants), how, r.Seed)},
		{"settings", fmt.Sprintf("grpc-go minimum re-resolution %gs; DNS TTL %gs", r.MinResolve, r.DNSTTL)},
	}
	if r.Cluster != "" {
		v.Header = append([]term{{"cluster", "the API server " + r.Cluster}}, v.Header...)
		v.Header[len(v.Header)-1].Value = fmt.Sprintf("grpc-go minimum re-resolution %gs; DNS: the cluster's own", r.MinResolve)
	}
	if len(r.Variants) > 1 {
		v.CmpRows, v.RunRows = comparisonRows(r), runRows(r)
	}
	for i, vr := range r.Variants {
		vv := variantView{Variant: vr, Anchor: fmt.Sprintf("variant-%d", i), Setup: setup(vr), Note: variantNote(vr), Charts: vcs[i],
			ErrorLines: errorLines(vr), Rebalance: rebalanceLine(vr), Why: whyLines(vr, "")}
		for j, w := range vr.Summary.Windows {
			vv.Windows = append(vv.Windows, windowView{Chart: vcs[i].Windows[j], Line: windowLine(w)})
		}
		vv.Checks = checkRows(vr)
		v.Checks = append(v.Checks, vv.Checks...)
		v.Why = append(v.Why, whyLines(vr, vr.Name)...)
		v.Variants = append(v.Variants, vv)
	}
	return v
}

// setup describes how a variant ran: its client groups, servers, patches
// and cluster DNS.
func setup(v Variant) []term {
	var out []term
	for _, g := range v.Groups {
		line := fmt.Sprintf("%s -> %s (%s", plural(g.Clients, "client"), g.Target, g.ServiceKind)
		if g.ClusterIP != "" {
			line += " " + g.ClusterIP
		}
		line += fmt.Sprintf("), %s, %g calls/s each", g.Policy, g.Rate)
		if g.Settings != "" {
			line += "; " + g.Settings
		}
		if g.Path != "" && g.Path != "direct" {
			line += "; via " + g.Path
		}
		out = append(out, term{"clients " + g.Name, line})
	}
	if v.Servers != "" {
		out = append(out, term{"servers", v.Servers})
	}
	if v.Patches != "" {
		out = append(out, term{"patches", v.Patches})
	}
	if v.DNS != "" {
		out = append(out, term{"cluster DNS", v.DNS})
	}
	if v.Dataplane != "" {
		out = append(out, term{"dataplane", v.dataplaneText()})
	}
	for _, d := range v.Diagnoses {
		line := fmt.Sprintf("at %.1fs: not collected: %s", d.At, d.Error)
		if d.Result != nil {
			line = fmt.Sprintf("at %.1fs: %s; %s", d.At, diagnoseTitle(d.Result), diagnoseFigures(d.Result))
		}
		out = append(out, term{"diagnose " + d.Service, line})
	}
	return out
}

// variantNote says when a variant failed or was interrupted.
func variantNote(v Variant) string {
	switch {
	case v.Error != "":
		return "FAILED: " + v.Error
	case v.State == "interrupted" && v.Interrupted > 0:
		return fmt.Sprintf("interrupted at %.1fs of load: windows not over by then are not reported", v.Interrupted)
	case v.State == "interrupted":
		return "interrupted while starting: no load was sent"
	}
	return ""
}

// windowLine sums up a window as the text report's window line does.
func windowLine(w stats.WindowStats) string {
	line := fmt.Sprintf("%.0f calls/s, Jain's index %s, max/mean %s, idle %d/%d, conns/client %.1f, errors %d, p50 %.2fms p99 %.2fms, schedule lag p99 %.2fms",
		w.Rate, ratio(w, w.Jain), ratio(w, w.MaxMean), w.Idle, len(w.Pods), w.ConnsPerClient, errorsIn(w), w.LatencyP50, w.LatencyP99, w.LagP99)
	if w.AddedPods > 0 {
		line += fmt.Sprintf("; pods added during the run: %d, %.1f%% of calls", w.AddedPods, 100*w.AddedShare)
	}
	if len(w.Errors) > 0 {
		line += "; errors by code: " + stats.CodeCounts(w.Errors)
	}
	if w.ConnsOpened > 0 {
		line += fmt.Sprintf("; connections opened: %d (%.2f/s)", w.ConnsOpened, w.ConnsOpenedPerSec)
	}
	return line
}

// errorLines list the variant's error windows with their causes.
func errorLines(v Variant) []string {
	var out []string
	for _, ew := range v.Summary.ErrorWindows {
		out = append(out, errorWindowText(ew))
	}
	for _, e := range v.StepErrors {
		out = append(out, "step failed: "+e)
	}
	return out
}

// rebalanceLine is the variant's time to rebalance, in words.
func rebalanceLine(v Variant) string {
	rbs := v.Summary.Rebalance
	switch t := stats.RebalanceSeconds(rbs); {
	case len(rbs) == 0:
		return "No pod was added during the run."
	case math.IsInf(t, 1):
		return fmt.Sprintf("Time to rebalance: never (a pod added during the run never got %.0f%% of a fair share).", 100*stats.RebalanceFraction)
	case math.IsNaN(t):
		return "Time to rebalance: none of the pods added during the run was Ready at the end."
	default:
		which := fmt.Sprintf("the slowest of %d added pods", len(rbs))
		if len(rbs) == 1 {
			which = "the one added pod"
		}
		return fmt.Sprintf("Time to rebalance: %.1fs (%s, to %.0f%% of a fair share).", t, which, 100*stats.RebalanceFraction)
	}
}

// whyLines are the variant's why lines, labelled with label (and the group
// when there are several).
func whyLines(v Variant, label string) []whyLine {
	if len(v.WhyByGroup) == 0 {
		if v.Why == "" {
			return nil
		}
		return []whyLine{{label, v.Why}}
	}
	var out []whyLine
	for _, w := range v.WhyByGroup {
		l := "group " + w.Group
		if label != "" {
			l = label + " (" + l + ")"
		}
		out = append(out, whyLine{l, w.Line})
	}
	return out
}

func checkRows(v Variant) []checkRow {
	var out []checkRow
	for _, c := range v.Checks {
		out = append(out, checkRow{Variant: v.Name, Name: c.Name, Verdict: checkVerdict(c), Where: checkWhere(c), Shown: shown(c), Bound: c.Bound, Note: c.Note})
	}
	return out
}

// shown is a check's measured value; a skipped one has none.
func shown(c verdict.Check) string {
	if c.Skipped {
		return "-"
	}
	return c.Shown
}
