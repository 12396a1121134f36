package verdict

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// Check is one expectation checked against a variant's measurements.
type Check struct {
	Name   string `json:"name"`
	Metric string `json:"metric"`
	Window string `json:"window,omitempty"`
	Group  string `json:"group,omitempty"`
	Pod    string `json:"pod,omitempty"`
	// Code and Cause narrow a failed-calls metric.
	Code  string `json:"code,omitempty"`
	Cause string `json:"cause,omitempty"`
	// Bound is the expected range, e.g. ">= 0.95" or "0..0.01".
	Bound string `json:"bound"`
	// Value is the measured value; nil when it is not a finite number (see
	// Shown, e.g. "never").
	Value *float64 `json:"value"`
	Shown string   `json:"shown"`
	Pass  bool     `json:"pass"`
	// Skipped is true for a check that could not be measured (an
	// interrupted run, a step that picked no pod); Note says why. It neither
	// passes nor fails.
	Skipped bool `json:"skipped,omitempty"`
	// Invalid is true for a timing check measured where the load
	// generator could not keep its schedule (see Expectations.Overloaded),
	// and for any check measured from a second the process stalled for a
	// probe's timeout (ProbeStall): its value is the machine's, so it
	// neither passes nor fails; Note says why.
	Invalid bool   `json:"invalid,omitempty"`
	Note    string `json:"note,omitempty"`
}

// input is what a metric is measured on.
type input struct {
	s     *stats.Summary
	w     *stats.WindowStats // nil for the whole run
	e     plan.Expectation
	pod   string
	group string
}

// metrics measure each of plan.Metrics.
var metrics = map[string]func(in input) float64{
	"jain":       func(in input) float64 { return in.w.Jain },
	"idlePods":   func(in input) float64 { return float64(in.w.Idle) },
	"addedShare": func(in input) float64 { return in.w.AddedShare },
	"calls":      func(in input) float64 { return float64(in.w.Calls) },
	"podsServing": func(in input) float64 {
		n := 0
		for _, p := range in.w.Pods {
			if p.Calls > 0 {
				n++
			}
		}
		return float64(n)
	},
	"maxPodsPerClient": func(in input) float64 {
		reached := map[string]int{}
		for _, p := range in.w.Pods {
			for client, n := range p.ByClient {
				if n > 0 {
					reached[client]++
				}
			}
		}
		most := 0
		for _, n := range reached {
			most = max(most, n)
		}
		return float64(most)
	},
	"failed":               failedCalls,
	"failedShare":          failedShare,
	"connsOpenedPerSecond": func(in input) float64 { return in.w.ConnsOpenedPerSec },
	"connsPerClient":       func(in input) float64 { return in.w.ConnsPerClient },
	"latencyP50Ms":         func(in input) float64 { return in.w.LatencyP50 },
	"latencyP99Ms":         func(in input) float64 { return in.w.LatencyP99 },
	"podCalls":             func(in input) float64 { p := podIn(in.w, in.pod); return float64(p.Calls) },
	"podShare":             func(in input) float64 { return podIn(in.w, in.pod).Share },
	"errorWindowSeconds": func(in input) float64 {
		var s float64
		for _, w := range in.s.ErrorWindows {
			s += w.Seconds()
		}
		return s
	},
	"errorWindows":     func(in input) float64 { return float64(len(in.s.ErrorWindows)) },
	"rebalanceSeconds": func(in input) float64 { return stats.RebalanceSeconds(in.s.Rebalance) },
}

func podIn(w *stats.WindowStats, name string) stats.PodStats {
	for _, p := range w.Pods {
		if p.Name == name {
			return p
		}
	}
	return stats.PodStats{}
}

// clients returns the clients of group ("" all).
func (in input) clients() []stats.ClientStats {
	var out []stats.ClientStats
	for _, c := range in.s.Clients {
		if in.group == "" || c.Group == in.group {
			out = append(out, c)
		}
	}
	return out
}

func failedCalls(in input) float64 {
	e := in.e
	if w := in.w; w != nil {
		switch {
		case e.Code != "":
			return float64(w.Errors[e.Code])
		case e.Cause != "":
			return float64(w.ErrorCauses[e.Cause])
		}
		return float64(w.Failed)
	}
	var n int64
	for _, c := range in.clients() {
		switch {
		case e.Code != "":
			n += c.Errors[e.Code]
		case e.Cause != "":
			n += c.Causes[e.Cause]
		default:
			for _, k := range c.Errors {
				n += k
			}
		}
	}
	return float64(n)
}

func failedShare(in input) float64 {
	var total int64
	if w := in.w; w != nil {
		total = w.ClientOK + w.Failed
	} else {
		for _, c := range in.clients() {
			total += c.OK
			for _, n := range c.Errors {
				total += n
			}
		}
	}
	if total == 0 {
		return 0
	}
	return failedCalls(in) / float64(total)
}

// check evaluates the variant's expectations; a timing check where the
// run was overloaded is invalid, unless overload could not have decided
// it (see holdsOverloaded); where the process stalled past a probe's
// timeout (ProbeStall), every check is, with the same exception.
func check(p *plan.Plan, v plan.Variant, s stats.Summary, overloaded []Overload) []Check {
	interrupted := time.Duration(s.End) < p.Duration
	var out []Check
	for _, e := range v.Expect {
		c := checkOne(e, &s, interrupted)
		o, ok := overloadOf(overloaded, e.Window)
		stallNote := ""
		if run, found := overloadOf(overloaded, ""); found && run.ProbeStallMs > 0 && !c.Skipped && endsAfter(&s, e, run.ProbeStallFrom) {
			// Probes may have failed: which pods were Ready, and so every
			// figure from then on, may be the machine's.
			stallNote = fmt.Sprintf("overloaded: the process stalled for up to %.0f ms from %.0fs, reaching a probe's default 1 s timeout, so probes could fail and change which pods were Ready: %s", run.ProbeStallMs, run.ProbeStallFrom, run.Reason)
			if !ok {
				o, ok = run, true
			}
		}
		switch {
		case !ok || c.Skipped || (!timing(e.Metric) && stallNote == ""):
		case timing(e.Metric) && holdsOverloaded(e, c):
			c.Note = "stands although overloaded: overload only raises " + e.Metric
		case stallNote != "":
			c.Pass, c.Invalid, c.Note = false, true, stallNote
		default:
			c.Pass, c.Invalid = false, true
			c.Note = "overloaded: " + o.Reason
		}
		out = append(out, c)
	}
	return out
}

// endsAfter reports whether what e measures reaches past second at of the
// run: a whole-run value does, a window does when it ends after it.
func endsAfter(s *stats.Summary, e plan.Expectation, at float64) bool {
	if e.Window == "" {
		return true
	}
	for _, w := range windowsOf(s, e.Group) {
		if w.Name == e.Window {
			return float64(w.To) > at
		}
	}
	return true
}

// holdsOverloaded reports whether check c of e stands on an overloaded
// machine: its metric is one overload only raises, and c passed an upper
// bound alone or fell short of a lower one.
func holdsOverloaded(e plan.Expectation, c Check) bool {
	if !plan.Metrics[e.Metric].OverloadRaises {
		return false
	}
	if c.Pass {
		return e.AtLeast == nil
	}
	return c.Value != nil && e.AtLeast != nil && *c.Value < *e.AtLeast
}

func checkOne(e plan.Expectation, s *stats.Summary, interrupted bool) Check {
	c := Check{Name: e.Name, Metric: e.Metric, Window: e.Window, Group: e.Group, Code: e.Code, Cause: e.Cause, Bound: bound(e), Shown: "n/a", Pod: e.Pod}
	if e.StepPod != "" {
		c.Pod = stepPod(s, e.StepPod)
	}
	skip := func(note string) Check { c.Note, c.Skipped = note, true; return c }
	if e.Window == "" && interrupted {
		return skip("not measured: the run was interrupted")
	}
	in := input{s: s, e: e, pod: c.Pod, group: e.Group}
	if e.Window != "" {
		ws := windowsOf(s, e.Group)
		i := slices.IndexFunc(ws, func(w stats.WindowStats) bool { return w.Name == e.Window })
		if i < 0 {
			return skip("not measured: the run was interrupted before the window ended")
		}
		in.w = &ws[i]
	}
	if plan.Metrics[e.Metric].Pod && c.Pod == "" {
		return skip("not measured: the step picked no pod (see the step failure)")
	}
	val := metrics[e.Metric](in)
	c.Shown = formatValue(val)
	if !math.IsNaN(val) && !math.IsInf(val, 0) {
		c.Value = &val
	}
	c.Pass = !math.IsNaN(val) && (e.AtLeast == nil || val >= *e.AtLeast) && (e.AtMost == nil || val <= *e.AtMost)
	if math.IsNaN(val) {
		c.Note = "nothing to measure: no pod was added during the run"
	}
	return c
}

// windowsOf returns the windows of one group ("" all groups together).
// With a single group, its windows are the run's.
func windowsOf(s *stats.Summary, group string) []stats.WindowStats {
	for _, g := range s.Groups {
		if g.Name == group {
			return g.Windows
		}
	}
	return s.Windows
}

// stepPod returns the pod the named step acted on ("" if none).
func stepPod(s *stats.Summary, step string) string {
	for _, st := range s.Steps {
		if st.Name == step {
			return st.Pod
		}
	}
	return ""
}

func bound(e plan.Expectation) string {
	switch {
	case e.AtLeast != nil && e.AtMost != nil:
		return fmt.Sprintf("%s..%s", formatValue(*e.AtLeast), formatValue(*e.AtMost))
	case e.AtLeast != nil:
		return ">= " + formatValue(*e.AtLeast)
	}
	return "<= " + formatValue(*e.AtMost)
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "never"
	case math.IsNaN(v):
		return "n/a"
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
