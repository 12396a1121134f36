package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/pinlab/pinlab/internal/chart"
	"github.com/pinlab/pinlab/internal/stats"
)

// The charts of the HTML report, built from a Result alone, so that a
// report rendered later from the saved JSON is the same page. Times are
// rounded to the millisecond, as the JSON keeps them.

// pageData is what the HTML report embeds as JSON and draws.
type pageData struct {
	Charts []chart.Chart `json:"charts"`
}

// variantCharts are the charts of one variant's section; nil when the
// variant has nothing to draw there.
type variantCharts struct {
	Timeline  *chart.Chart
	Windows   []chart.Chart
	Failed    *chart.Chart
	Conns     *chart.Chart
	Rebalance *chart.Chart
}

// comparisonCharts are the charts comparing variants side by side.
type comparisonCharts struct {
	Windows []windowCharts
	Added   *chart.Chart
	Failed  *chart.Chart
}

// windowCharts are one window's per-pod bar charts, one per variant that
// measured it, on the same axes.
type windowCharts struct {
	Window WindowSpec
	Charts []chart.Chart
}

// charts builds every chart of the report: each variant's (index-aligned
// with r.Variants), then the comparison.
func charts(r *Result) ([]variantCharts, comparisonCharts) {
	vcs := make([]variantCharts, len(r.Variants))
	for i, v := range r.Variants {
		if v.Error != "" || !started(v) {
			continue
		}
		vc := &vcs[i]
		id := fmt.Sprintf("v%d", i)
		for j, w := range v.Summary.Windows {
			vc.Windows = append(vc.Windows, windowChart(fmt.Sprintf("%s-w%d", id, j), fmt.Sprintf("Window %s (%s to %s): calls/s per pod", w.Name, secs(w.From), secs(w.To)), w, r))
		}
		if len(v.Summary.Timeline) == 0 {
			continue // no pod served a call: nothing over time to draw
		}
		vc.Timeline = ptr(timelineChart(id, v, r))
		vc.Failed = ptr(failedChart(id, v, r))
		vc.Conns = ptr(connsChart(id, v, r))
		if len(v.Summary.Rebalance) > 0 {
			vc.Rebalance = ptr(rebalanceChart(id, v))
		}
	}
	sameAxes(vcs, func(vc *variantCharts) *chart.Chart { return vc.Timeline })
	sameAxes(vcs, func(vc *variantCharts) *chart.Chart { return vc.Failed })
	sameAxes(vcs, func(vc *variantCharts) *chart.Chart { return vc.Conns })
	return vcs, comparison(r)
}

func ptr(c chart.Chart) *chart.Chart { return &c }

// started reports whether the variant's load ran (it has a timeline).
func started(v Variant) bool { return len(v.Summary.Timeline) > 0 || len(v.Summary.Windows) > 0 }

// sameAxes gives the charts pick returns the same axes, so that variants
// compare at a glance.
func sameAxes(vcs []variantCharts, pick func(*variantCharts) *chart.Chart) {
	var xmax, ymax float64
	for i := range vcs {
		if c := pick(&vcs[i]); c != nil {
			xmax, ymax = max(xmax, c.XMax), max(ymax, c.YMax)
		}
	}
	for i := range vcs {
		if c := pick(&vcs[i]); c != nil {
			c.XMax, c.YMax = xmax, ymax
		}
	}
}

// niceMax rounds m up to 1, 2 or 5 times a power of ten (as the page's
// own axes do), at least 1.
func niceMax(m float64) float64 {
	if m <= 0 || math.IsNaN(m) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(m)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*p >= m*(1-1e-12) {
			return f * p
		}
	}
	return 10 * p
}

// ms rounds seconds to the millisecond, as the JSON keeps offsets.
func ms(s float64) float64 { return math.Round(s*1000) / 1000 }

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// secs formats seconds for captions: "10 s", "31.5 s".
func secs(s float64) string { return fmt.Sprintf("%g s", ms(s)) }

// podLabel is the short label of the pod with 1-based ordinal n.
func podLabel(n int) string { return fmt.Sprintf("p%d", n) }

// podOrder returns the variant's pod names in order of creation (the
// ordinals of the per-window tables), then any other pod of its timeline.
func podOrder(s stats.Summary) []string {
	var names []string
	for _, p := range s.Pods {
		if _, ok := s.Timeline[p.Name]; ok {
			names = append(names, p.Name)
		}
	}
	var rest []string
	for name := range s.Timeline {
		if !slices.Contains(names, name) {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

// seconds returns 0, 1, ... n-1.
func secondsAxis(n int) chart.Values {
	x := make(chart.Values, n)
	for i := range x {
		x[i] = float64(i)
	}
	return x
}

// runSeconds is how many seconds the variant's per-second charts span:
// the run's length (up to the interruption, if any), and any second after
// it in which calls were served or failed (calls that ended just after the
// run). A last second with neither is left out: it only says that load had
// stopped, and drawn it made every line fall to zero at the end.
func runSeconds(v Variant, r *Result) int {
	end := r.Duration
	if v.Interrupted > 0 {
		end = v.Interrupted
	}
	n := int(math.Ceil(end - 1e-9))
	for _, tl := range v.Summary.Timeline {
		n = max(n, used(tl))
	}
	return max(n, used(v.Summary.FailedTimeline))
}

// used is the length of series s without its trailing zeros.
func used(s []int64) int {
	n := len(s)
	for n > 0 && s[n-1] == 0 {
		n--
	}
	return n
}

// marks are the variant's timeline steps as carried out.
func marks(v Variant) []chart.Mark {
	var out []chart.Mark
	for _, st := range v.Summary.Steps {
		text := st.Text
		if st.Error != "" {
			text += " (failed)"
		}
		out = append(out, chart.Mark{At: ms(st.At.Seconds()), Text: text})
	}
	return out
}

// windowBands shade the run's measurement windows.
func windowBands(r *Result) []chart.Band {
	var out []chart.Band
	for _, w := range r.Windows {
		out = append(out, chart.Band{From: ms(w.From), To: ms(w.To), Kind: chart.Window, Text: "window " + w.Name})
	}
	return out
}

// timelineChart is calls/s per pod, one series per pod, steps and windows
// marked.
func timelineChart(id string, v Variant, r *Result) chart.Chart {
	n := runSeconds(v, r)
	c := chart.Chart{
		ID: id + "-timeline", Kind: chart.Line, Title: "Calls/s per pod (server side), per second",
		XLabel: "time (s)", YLabel: "calls/s", Unit: "calls/s", XUnit: "s",
		X: secondsAxis(n), XMax: float64(n), Marks: marks(v), Bands: windowBands(r),
	}
	var top float64
	for i, name := range podOrder(v.Summary) {
		vals := make(chart.Values, n)
		for s, calls := range v.Summary.Timeline[name] {
			if s < n {
				vals[s] = float64(calls)
				top = max(top, float64(calls))
			}
		}
		c.Series = append(c.Series, chart.Series{Label: podLabel(i + 1), Name: podLabel(i+1) + " " + name, Values: vals})
	}
	c.YMax = niceMax(top)
	return c
}

// windowChart is one window's calls/s per pod: the bars that show pinning. Pods
// that were never Ready in the window and served nothing have no bar.
func windowChart(id, title string, w stats.WindowStats, r *Result) chart.Chart {
	pods := append(slices.Clone(w.Pods), w.OtherPods...)
	slices.SortStableFunc(pods, func(a, b stats.PodStats) int { return a.Ordinal - b.Ordinal })
	c := chart.Chart{ID: id, Kind: chart.Bars, Title: title, XLabel: "pod", YLabel: "calls/s", Unit: "calls/s", X: secondsAxis(len(pods))}
	vals := make(chart.Values, len(pods))
	var top float64
	for i, p := range pods {
		c.Categories = append(c.Categories, podLabel(p.Ordinal))
		counted := slices.ContainsFunc(w.Pods, func(q stats.PodStats) bool { return q.Name == p.Name })
		if !counted {
			vals[i] = math.NaN()
			c.Notes = append(c.Notes, fmt.Sprintf("%s %s; not counted (%s): never Ready in the window and served nothing", p.Name, p.IP, podState(p)))
			continue
		}
		vals[i] = round1(p.Rate)
		top = max(top, vals[i])
		c.Notes = append(c.Notes, podNote(p, w, r))
	}
	c.Series = []chart.Series{{Label: "rate", Values: vals}}
	c.XMax = float64(max(len(pods)-1, 0))
	c.YMax = niceMax(top)
	return c
}

// podNote is a pod's line in a window: who it is, when it became Ready,
// its share, calls, connections (unless a cluster run, whose pods are not
// asked) and state.
func podNote(p stats.PodStats, w stats.WindowStats, r *Result) string {
	ready := "never Ready"
	if p.ReadyAt != nil {
		ready = "Ready at " + seconds(*p.ReadyAt)
		if p.Added {
			ready += " (added during the run)"
		}
	}
	conns := fmt.Sprintf("%.1f client connections", p.Conns)
	if !podConnsSeen(r) {
		conns = "client connections not observed on a cluster"
	}
	return fmt.Sprintf("%s %s; %s; %.1f%% of calls, %d calls in %s; %s; %s",
		p.Name, p.IP, ready, 100*p.Share, p.Calls, secs(w.To-w.From), conns, podState(p))
}

// failedChart is failed calls per second, error windows shaded.
func failedChart(id string, v Variant, r *Result) chart.Chart {
	n := runSeconds(v, r)
	vals := make(chart.Values, n)
	var top float64
	for s, k := range v.Summary.FailedTimeline {
		if s < n {
			vals[s] = float64(k)
			top = max(top, float64(k))
		}
	}
	c := chart.Chart{
		ID: id + "-failed", Kind: chart.Line, Title: "Failed calls per second (client side, by due time)",
		XLabel: "time (s)", YLabel: "failed calls/s", Unit: "failed", XUnit: "s",
		X: secondsAxis(n), XMax: float64(n), YMax: niceMax(top), Marks: marks(v),
		Series: []chart.Series{{Label: "failed", Name: "failed calls", Values: vals}},
	}
	for _, ew := range v.Summary.ErrorWindows {
		c.Bands = append(c.Bands, chart.Band{From: ms(ew.From.Seconds()), To: ms(ew.To.Seconds()), Kind: chart.Errors, Text: errorWindowText(ew)})
	}
	return c
}

// errorWindowText says when an error window was, how many calls failed
// and why.
func errorWindowText(ew stats.ErrorWindow) string {
	text := fmt.Sprintf("error window %s to %s (%s): %d failed; %s", secs(ew.From.Seconds()), secs(ew.To.Seconds()), secs(ew.Seconds()), ew.Failed, stats.CodeCounts(ew.ByCode))
	if len(ew.ByCause) > 0 {
		text += "; causes: " + stats.CodeCounts(ew.ByCause)
	}
	return text
}

// perSecond counts offsets (seconds) into n one-second bins; offsets
// before the start count in the first, after the end in none.
func perSecond(n int, offsets []float64) chart.Values {
	vals := make(chart.Values, n)
	for _, at := range offsets {
		if s := int(math.Floor(max(ms(at), 0))); s < n {
			vals[s]++
		}
	}
	return vals
}

// connsChart is client connections opened per second, connections open at
// each second's start, and cluster DNS lookups per second (not on a
// cluster run: its DNS is not logged).
func connsChart(id string, v Variant, r *Result) chart.Chart {
	n := runSeconds(v, r)
	var opened, dns []float64
	delta := make([]float64, n+1) // open[s] = sum of delta[:s+1]
	for _, c := range v.Summary.Clients {
		for _, conn := range c.Conns {
			from := ms(conn.Opened.Seconds())
			opened = append(opened, from)
			hi := n
			if conn.Closed != nil {
				hi = min(int(math.Ceil(ms(conn.Closed.Seconds()))), n)
			}
			// Open at the start of seconds s with from <= s < closed.
			if lo := max(int(math.Ceil(from)), 0); lo < hi {
				delta[lo]++
				delta[hi]--
			}
		}
	}
	open := make(chart.Values, n)
	var cur float64
	for s := range n {
		cur += delta[s]
		open[s] = cur
	}
	for _, q := range v.Summary.DNS {
		dns = append(dns, q.At.Seconds())
	}
	c := chart.Chart{
		ID: id + "-conns", Kind: chart.Line, Title: "Client connections and cluster DNS lookups",
		XLabel: "time (s)", YLabel: "count", XUnit: "s", X: secondsAxis(n), XMax: float64(n), Marks: marks(v),
		Series: []chart.Series{
			{Label: "open", Name: "client connections open at the second's start", Values: open},
			{Label: "opened/s", Name: "client connections opened", Values: perSecond(n, opened)},
		},
	}
	if r.Cluster == "" {
		c.Series = append(c.Series, chart.Series{Label: "DNS/s", Name: "cluster DNS lookups answered", Values: perSecond(n, dns)})
	} else {
		c.Title = "Client connections"
	}
	var top float64
	for _, s := range c.Series {
		for _, x := range s.Values {
			top = max(top, x)
		}
	}
	c.YMax = niceMax(top)
	return c
}

// rebalanceChart is, per pod added during the run, the seconds from Ready
// to its first fair share; pods that never got one have no bar.
func rebalanceChart(id string, v Variant) chart.Chart {
	ordinal := map[string]int{}
	for i, p := range v.Summary.Pods {
		ordinal[p.Name] = i + 1
	}
	rbs := v.Summary.Rebalance
	c := chart.Chart{
		ID: id + "-rebalance", Kind: chart.Bars, XLabel: "pod added during the run", YLabel: "seconds to a fair share", Unit: "s",
		Title: fmt.Sprintf("Time to rebalance: seconds from Ready to %.0f%% of a fair share, per added pod", 100*stats.RebalanceFraction),
		X:     secondsAxis(len(rbs)), XMax: float64(max(len(rbs)-1, 0)),
	}
	vals := make(chart.Values, len(rbs))
	var top float64
	for i, rb := range rbs {
		label := rb.Pod
		if n, ok := ordinal[rb.Pod]; ok {
			label = podLabel(n)
		}
		c.Categories = append(c.Categories, label)
		note := fmt.Sprintf("%s, Ready at %s", rb.Pod, seconds(rb.ReadyAt.Seconds()))
		if rb.After == nil {
			vals[i] = math.NaN()
			note += fmt.Sprintf("; never got %.0f%% of a fair share", 100*stats.RebalanceFraction)
		} else {
			vals[i] = ms(*rb.After)
			top = max(top, vals[i])
			note += fmt.Sprintf("; got %.0f%% of a fair share %s later", 100*stats.RebalanceFraction, secs(*rb.After))
		}
		if !rb.Survived {
			note += "; not Ready at the end (not counted in the time to rebalance)"
		}
		c.Notes = append(c.Notes, note)
	}
	c.Series = []chart.Series{{Label: "seconds", Values: vals}}
	c.YMax = niceMax(top)
	return c
}

// comparison builds the charts comparing the variants on the same axes.
func comparison(r *Result) comparisonCharts {
	var cc comparisonCharts
	if len(r.Variants) < 2 {
		return cc
	}
	for j, ws := range r.Windows {
		wc := windowCharts{Window: ws}
		for i, v := range r.Variants {
			if w, ok := windowNamed(v, ws.Name); ok && v.Error == "" {
				wc.Charts = append(wc.Charts, windowChart(fmt.Sprintf("cmp-w%d-v%d", j, i), v.Name, w, r))
			}
		}
		var xmax, ymax float64
		for _, c := range wc.Charts {
			xmax, ymax = max(xmax, c.XMax), max(ymax, c.YMax)
		}
		for k := range wc.Charts {
			wc.Charts[k].XMax, wc.Charts[k].YMax = xmax, ymax
		}
		if len(wc.Charts) > 0 {
			cc.Windows = append(cc.Windows, wc)
		}
	}
	cc.Added = addedChart(r)
	cc.Failed = failedComparison(r)
	return cc
}

// addedAt reports whether the pod first turned Ready after load started.
func addedAt(p stats.PodLife) bool {
	for _, ph := range p.Phases {
		if ph.Phase == stats.PodReady {
			return ph.At > 0
		}
	}
	return false
}

// addedChart is, per variant, the share of each second's calls that pods
// added during the run served; nil when no variant added pods.
func addedChart(r *Result) *chart.Chart {
	n := 0
	for _, v := range r.Variants {
		n = max(n, runSeconds(v, r))
	}
	c := chart.Chart{
		ID: "cmp-added", Kind: chart.Line, Title: "Share of calls served by pods added during the run, per second",
		XLabel: "time (s)", YLabel: "% of calls", Unit: "%", XUnit: "s", X: secondsAxis(n), XMax: float64(n), YMax: 100,
		Bands: windowBands(r),
	}
	any := false
	for _, v := range r.Variants {
		if v.Error != "" || !started(v) {
			continue
		}
		added := map[string]bool{}
		for _, p := range v.Summary.Pods {
			added[p.Name] = addedAt(p)
			any = any || added[p.Name]
		}
		vals := make(chart.Values, n)
		for s := range n {
			var all, mine int64
			for name, tl := range v.Summary.Timeline {
				if s < len(tl) {
					all += tl[s]
					if added[name] {
						mine += tl[s]
					}
				}
			}
			vals[s] = math.NaN()
			if all > 0 {
				vals[s] = round1(100 * float64(mine) / float64(all))
			}
		}
		c.Series = append(c.Series, chart.Series{Label: v.Name, Values: vals})
	}
	if !any {
		return nil
	}
	if len(r.Variants) > 0 {
		c.Marks = marks(r.Variants[0])
	}
	return &c
}

// failedComparison is failed calls per second, one series per variant;
// nil when no call failed.
func failedComparison(r *Result) *chart.Chart {
	n := 0
	for _, v := range r.Variants {
		n = max(n, runSeconds(v, r))
	}
	c := chart.Chart{
		ID: "cmp-failed", Kind: chart.Line, Title: "Failed calls per second, per variant",
		XLabel: "time (s)", YLabel: "failed calls/s", Unit: "failed", XUnit: "s", X: secondsAxis(n), XMax: float64(n),
	}
	var top float64
	for _, v := range r.Variants {
		if v.Error != "" || !started(v) {
			continue
		}
		vals := make(chart.Values, n)
		for s, k := range v.Summary.FailedTimeline {
			if s < n {
				vals[s] = float64(k)
				top = max(top, float64(k))
			}
		}
		c.Series = append(c.Series, chart.Series{Label: v.Name, Values: vals})
	}
	if top == 0 {
		return nil
	}
	c.YMax = niceMax(top)
	if len(r.Variants) > 0 {
		c.Marks = marks(r.Variants[0])
	}
	return &c
}

// all lists every chart, in page order.
func all(vcs []variantCharts, cc comparisonCharts) []chart.Chart {
	var out []chart.Chart
	add := func(c *chart.Chart) {
		if c != nil {
			out = append(out, *c)
		}
	}
	for i := range vcs {
		vc := &vcs[i]
		add(vc.Timeline)
		out = append(out, vc.Windows...)
		add(vc.Failed)
		add(vc.Conns)
		add(vc.Rebalance)
	}
	for _, wc := range cc.Windows {
		out = append(out, wc.Charts...)
	}
	add(cc.Added)
	add(cc.Failed)
	return out
}
