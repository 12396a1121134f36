package scenario

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/stats"
	"google.golang.org/grpc/codes"
)

// metric describes one value an expectation can bound.
type metric struct {
	window bool // needs a window; otherwise it is over the whole run
	pod    bool // needs a pod
	doc    string
	value  func(v *report.Variant, w *stats.WindowStats, e Expectation, pod string) float64
}

// Metrics are the values expectations can bound, by name.
var Metrics = map[string]metric{
	"jain":     {window: true, doc: "Jain's fairness index over the pods' calls", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 { return w.Jain }},
	"idlePods": {window: true, doc: "pods with less than a tenth of a fair share", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 { return float64(w.Idle) }},
	"addedShare": {window: true, doc: "share of calls served by pods that turned Ready during the run",
		value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 { return w.AddedShare }},
	"calls": {window: true, doc: "calls the pods served", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 {
		return float64(w.Calls)
	}},
	"podsServing": {window: true, doc: "pods that served at least one call", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 {
		n := 0
		for _, p := range w.Pods {
			if p.Calls > 0 {
				n++
			}
		}
		return float64(n)
	}},
	"maxPodsPerClient": {window: true, doc: "the most pods any one client's calls reached", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 {
		reached := map[string]int{}
		for _, p := range w.Pods {
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
	}},
	"failed": {doc: "failed calls (by client), in a window or the whole run; code and cause narrow it", value: failedCalls},
	"failedShare": {doc: "failed calls over all calls the clients finished, in a window or the whole run", value: func(v *report.Variant, w *stats.WindowStats, e Expectation, _ string) float64 {
		var total int64
		if w != nil {
			total = w.ClientOK + w.Failed
		} else {
			for _, c := range v.Summary.Clients {
				total += c.OK
				for _, n := range c.Errors {
					total += n
				}
			}
		}
		if total == 0 {
			return 0
		}
		return failedCalls(v, w, e, "") / float64(total)
	}},
	"connsOpenedPerSecond": {window: true, doc: "client connections opened per second (reconnects)",
		value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 {
			return w.ConnsOpenedPerSec
		}},
	"connsPerClient": {window: true, doc: "time-averaged open connections per client",
		value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 {
			return w.ConnsPerClient
		}},
	"latencyP50Ms": {window: true, doc: "median call latency in ms", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 { return w.LatencyP50 }},
	"latencyP99Ms": {window: true, doc: "99th percentile call latency in ms", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, _ string) float64 { return w.LatencyP99 }},
	"podCalls": {window: true, pod: true, doc: "calls one pod served", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, pod string) float64 {
		for _, p := range w.Pods {
			if p.Name == pod {
				return float64(p.Calls)
			}
		}
		return 0
	}},
	"podShare": {window: true, pod: true, doc: "one pod's share of the calls", value: func(_ *report.Variant, w *stats.WindowStats, _ Expectation, pod string) float64 {
		for _, p := range w.Pods {
			if p.Name == pod {
				return p.Share
			}
		}
		return 0
	}},
	"errorWindowSeconds": {doc: "total length of the run's error windows in seconds", value: func(v *report.Variant, _ *stats.WindowStats, _ Expectation, _ string) float64 {
		var s float64
		for _, w := range v.Summary.ErrorWindows {
			s += w.Seconds()
		}
		return s
	}},
	"errorWindows": {doc: "number of error windows", value: func(v *report.Variant, _ *stats.WindowStats, _ Expectation, _ string) float64 {
		return float64(len(v.Summary.ErrorWindows))
	}},
	"rebalanceSeconds": {doc: "time to rebalance: from a pod turning Ready to its share reaching 90% of fair, the longest over pods added during the run (infinite if one never did)",
		value: func(v *report.Variant, _ *stats.WindowStats, _ Expectation, _ string) float64 {
			return stats.RebalanceSeconds(v.Summary.Rebalance)
		}},
}

// unitMetrics are the metrics whose values lie in [0, 1].
var unitMetrics = map[string]bool{"jain": true, "addedShare": true, "failedShare": true, "podShare": true}

// metricNames lists Metrics' names, sorted.
func metricNames() string {
	var names []string
	for n := range Metrics {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func failedCalls(v *report.Variant, w *stats.WindowStats, e Expectation, _ string) float64 {
	if w != nil {
		switch {
		case e.Code != "":
			return float64(w.Errors[e.Code])
		case e.Cause != "":
			return float64(w.ErrorCauses[e.Cause])
		}
		return float64(w.Failed)
	}
	var n int64
	for _, c := range v.Summary.Clients {
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

// statusCodes are gRPC codes by their String() names (Unavailable).
var statusCodes = func() map[string]codes.Code {
	m := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[c.String()] = c
	}
	return m
}()

// checkExpectation validates e against the file's windows, variants and
// steps.
func (f *File) checkExpectation(i int, e Expectation) error {
	d, sp := f.doc, f.Scenario.Spec
	p := fmt.Sprintf("spec.expect[%d]", i)
	if strings.TrimSpace(e.Name) == "" {
		return d.Errorf(p+".name", "required: say what is expected")
	}
	m, ok := Metrics[e.Metric]
	if !ok {
		return d.Errorf(p+".metric", "%q: expected one of %s", e.Metric, metricNames())
	}
	if e.AtLeast == nil && e.AtMost == nil {
		return d.Errorf(p, "set atLeast, atMost or both")
	}
	if e.AtLeast != nil && e.AtMost != nil && *e.AtLeast > *e.AtMost {
		return d.Errorf(p, "atLeast %v is above atMost %v", *e.AtLeast, *e.AtMost)
	}
	switch {
	case m.window && e.Window == "":
		return d.Errorf(p+".window", "metric %s is measured in a window; name one of spec.windows", e.Metric)
	case e.Window != "" && !slices.ContainsFunc(f.windowsOrDefault(), func(w Window) bool { return w.Name == e.Window }):
		return d.Errorf(p+".window", "%q names no window (windows: %s)", e.Window, f.windowNames())
	case e.Window != "" && !m.window && e.Metric != "failed" && e.Metric != "failedShare":
		return d.Errorf(p+".window", "metric %s is over the whole run; remove window", e.Metric)
	}
	switch {
	case m.pod && e.Pod == "":
		return d.Errorf(p+".pod", "metric %s needs a pod: a pod name or @<step name>", e.Metric)
	case !m.pod && e.Pod != "":
		return d.Errorf(p+".pod", "metric %s is not about one pod; remove pod", e.Metric)
	case e.Pod != "" && !strings.HasPrefix(e.Pod, "@") && !f.podMayExist(e.Pod, ""):
		return d.Errorf(p+".pod", "%q: expected @<step name> (the pod a step acted on) or the name of a StatefulSet pod (<set>-<ordinal>); other pods' names are random", e.Pod)
	case strings.HasPrefix(e.Pod, "@"):
		name := e.Pod[1:]
		j := slices.IndexFunc(sp.Timeline, func(s Step) bool { return s.Name == name })
		if j < 0 {
			return d.Errorf(p+".pod", "%q: no timeline step is named %q", e.Pod, name)
		}
		if sp.Timeline[j].podRef() == nil {
			return d.Errorf(p+".pod", "%q: step %q does not act on a pod", e.Pod, name)
		}
	}
	if e.Code != "" || e.Cause != "" {
		if e.Metric != "failed" && e.Metric != "failedShare" {
			return d.Errorf(p, "code and cause narrow only the failed and failedShare metrics")
		}
		if e.Code != "" && e.Cause != "" {
			return d.Errorf(p, "set code or cause, not both")
		}
		if e.Code != "" && (statusCodes[e.Code] == codes.OK) {
			return d.Errorf(p+".code", "%q: expected a gRPC status code name such as Unavailable or DeadlineExceeded", e.Code)
		}
		if e.Cause != "" && !slices.Contains(load.Causes, load.Cause(e.Cause)) {
			var names []string
			for _, c := range load.Causes {
				names = append(names, string(c))
			}
			return d.Errorf(p+".cause", "%q: expected one of %s", e.Cause, strings.Join(names, ", "))
		}
	}
	if unitMetrics[e.Metric] {
		for _, b := range []*float64{e.AtLeast, e.AtMost} {
			if b != nil && (*b < 0 || *b > 1) {
				return d.Errorf(p, "metric %s is between 0 and 1; got bound %v", e.Metric, *b)
			}
		}
	}
	names := map[string]bool{}
	for _, v := range sp.Variants {
		names[v.Name] = true
	}
	if len(sp.Variants) == 0 {
		names["base"] = true
	}
	for j, v := range e.Variants {
		if !names[v] {
			return d.Errorf(fmt.Sprintf("%s.variants[%d]", p, j), "%q names no variant", v)
		}
	}
	return nil
}

func (f *File) windowsOrDefault() []Window {
	if ws := f.Scenario.Spec.Windows; len(ws) > 0 {
		return ws
	}
	return []Window{{Name: "run"}}
}

func (f *File) windowNames() string {
	var out []string
	for _, w := range f.windowsOrDefault() {
		out = append(out, w.Name)
	}
	return strings.Join(out, ", ")
}

// checkExpectations evaluates the file's expectations that apply to v.
// Pods named "@step" are looked up in stepPods.
func checkExpectations(exps []Expectation, v *report.Variant, stepPods map[string]string) []report.Check {
	var out []report.Check
	for _, e := range exps {
		if len(e.Variants) > 0 && !slices.Contains(e.Variants, v.Name) {
			continue
		}
		c := report.Check{Name: e.Name, Metric: e.Metric, Window: e.Window, Code: e.Code, Cause: e.Cause, Bound: bound(e), Shown: "n/a"}
		pod := e.Pod
		if name, ok := strings.CutPrefix(pod, "@"); ok {
			pod = stepPods[name]
		}
		c.Pod = pod
		m := Metrics[e.Metric]
		if e.Window == "" && v.Interrupted > 0 {
			c.Note, c.Skipped = "not measured: the run was interrupted", true
			out = append(out, c)
			continue
		}
		var w *stats.WindowStats
		if e.Window != "" {
			i := slices.IndexFunc(v.Summary.Windows, func(w stats.WindowStats) bool { return w.Name == e.Window })
			if i < 0 {
				c.Note, c.Skipped = "not measured: the run was interrupted before the window ended", true
				out = append(out, c)
				continue
			}
			w = &v.Summary.Windows[i]
		}
		if m.pod && pod == "" {
			c.Note, c.Skipped = "not measured: the step picked no pod (see the step failure)", true
			out = append(out, c)
			continue
		}
		val := m.value(v, w, e, pod)
		c.Shown = formatValue(val)
		if !math.IsNaN(val) && !math.IsInf(val, 0) {
			c.Value = &val
		}
		c.Pass = !math.IsNaN(val) && (e.AtLeast == nil || val >= *e.AtLeast) && (e.AtMost == nil || val <= *e.AtMost)
		if math.IsNaN(val) {
			c.Note = "nothing to measure: no pod was added during the run"
		}
		out = append(out, c)
	}
	return out
}

func bound(e Expectation) string {
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
