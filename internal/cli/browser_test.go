package cli

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"
	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/browsertest"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/stats"
)

// shortScaleOut is a short scale-out: pricing goes from 2 to 4 pods at 2s,
// under a ClusterIP and a headless round_robin variant.
const shortScaleOut = upManifest + headlessPricing + `---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: short-scale-out}
spec:
  duration: %s
  clients:
  - {name: order, namespace: shop, count: 2, target: pricing.shop.svc.cluster.local:8471, policy: pick_first, rate: 40}
  timeline:
  - at: %s
    scale: {deployment: pricing, replicas: 4}
  windows:
  - {name: before, from: 500ms, to: %s}
  - {name: after, from: %s, to: %s}
  variants:
  - name: clusterip
  - name: headless-rr
    clients: [{target: "dns:///pricing-headless.shop.svc.cluster.local:8471", policy: round_robin}]
`

// writeScenario writes shortScaleOut lasting dur with the scale step at
// step, and returns its path.
func writeScenario(t *testing.T, dur, step time.Duration) string {
	t.Helper()
	yaml := fmt.Sprintf(shortScaleOut, dur, step, step, step+time.Second, dur)
	path := filepath.Join(t.TempDir(), "short.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// chartDrawn is what the page says it drew for a chart.
type chartDrawn struct {
	Kind           string
	Series, Points int
}

// wantCharts derives, from the result alone, the charts the report must
// draw and their series and points. The comparison's charts (cmp-*) need
// two variants or more.
func wantCharts(res *report.Result) map[string]chartDrawn {
	want := map[string]chartDrawn{}
	most, added, failed := 0, false, false
	compare := len(res.Variants) > 1
	for i, v := range res.Variants {
		s := v.Summary
		// A point a second: the run, and any later second with calls in it.
		n := int(math.Ceil(res.Duration))
		for _, tl := range s.Timeline {
			n = max(n, lastNonZero(tl)+1)
		}
		n = max(n, lastNonZero(s.FailedTimeline)+1)
		most = max(most, n)
		id := fmt.Sprintf("v%d", i)
		want[id+"-timeline"] = chartDrawn{"line", len(s.Timeline), n}
		for j, w := range s.Windows {
			want[fmt.Sprintf("%s-w%d", id, j)] = chartDrawn{"bars", 1, len(w.Pods) + len(w.OtherPods)}
			if compare {
				want[fmt.Sprintf("cmp-w%d-v%d", j, i)] = chartDrawn{"bars", 1, len(w.Pods) + len(w.OtherPods)}
			}
		}
		want[id+"-failed"] = chartDrawn{"line", 1, n}
		want[id+"-conns"] = chartDrawn{"line", 3, n} // open, opened, DNS lookups
		if len(s.Rebalance) > 0 {
			want[id+"-rebalance"] = chartDrawn{"bars", 1, len(s.Rebalance)}
			added = true
		}
		failed = failed || slices.ContainsFunc(s.FailedTimeline, func(k int64) bool { return k > 0 })
	}
	if added && compare {
		want["cmp-added"] = chartDrawn{"line", len(res.Variants), most}
	}
	if failed && compare {
		want["cmp-failed"] = chartDrawn{"line", len(res.Variants), most}
	}
	return want
}

// lastNonZero is the index of s's last value that is not zero, or -1.
func lastNonZero(s []int64) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] != 0 {
			return i
		}
	}
	return -1
}

// TestReportInBrowser runs a short scale-out with --html and opens the
// report in headless Chromium: every chart is drawn with the series and
// points of the result, a tooltip and the keyboard give exact figures, the
// tables are there, dark mode draws too, nothing is fetched and nothing
// errs in the console.
func TestReportInBrowser(t *testing.T) {
	b := browsertest.New(t)
	dir := t.TempDir()
	html, saved := filepath.Join(dir, "report.html"), filepath.Join(dir, "result.json")
	var out, errb bytes.Buffer
	args := []string{"lab", "run", writeScenario(t, 6*time.Second, 2*time.Second), "-o", "json", "--html", html, "--progress", "off", "--seed", "7"}
	if code := run(context.Background(), args, &out, &errb); code != ExitOK {
		t.Fatalf("lab run: exit code %d: %s", code, errb.String())
	}
	if err := os.WriteFile(saved, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := report.ReadJSON(&out)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p := b.Open(t, "file://"+html)
	p.WaitFor(`window.pinlabRendered !== undefined`, browsertest.Timeout)
	t.Logf("report of %d charts drawn %v after navigation started", len(wantCharts(res)), time.Since(start).Round(time.Millisecond))

	t.Run("charts", func(t *testing.T) { checkCharts(t, p, wantCharts(res)) })
	t.Run("tooltip", func(t *testing.T) { checkTooltip(t, p, res) })
	t.Run("keyboard", func(t *testing.T) { checkKeyboard(t, p, res) })
	t.Run("table", func(t *testing.T) {
		p.Click("#v0-timeline details.data summary")
		want := wantCharts(res)["v0-timeline"].Points // one row per second
		p.WaitFor(fmt.Sprintf(`document.querySelectorAll("#v0-timeline details.data tbody tr").length === %d`, want), 10*time.Second)
	})
	t.Run("dark", func(t *testing.T) {
		p.ColorScheme("dark")
		p.WaitFor(`getComputedStyle(document.documentElement).backgroundColor === "rgb(18, 21, 27)"`, 10*time.Second)
		checkCharts(t, p, wantCharts(res))
	})
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, "file://") && !strings.HasPrefix(u, "data:") {
			t.Errorf("the report requested %s; it must open offline", u)
		}
	}
}

// checkCharts compares what the page drew with want, and checks that every
// chart's canvas has something on it.
func checkCharts(t *testing.T, p *browsertest.Page, want map[string]chartDrawn) {
	t.Helper()
	var got map[string]chartDrawn
	p.Eval(`(() => { const out = {}; for (const [id, c] of Object.entries(pinlabCharts)) out[id] = {Kind: c.kind, Series: c.series, Points: c.points}; return out; })()`, &got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("charts drawn (-want +got):\n%s", diff)
	}
	var blank []string
	p.Eval(`(() => {
		const blank = [];
		document.querySelectorAll("figure.chart").forEach(fig => {
			const c = fig.querySelector("canvas");
			if (!c || !c.width) { blank.push(fig.id + ": no canvas"); return; }
			const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
			let ink = 0;
			for (let i = 3; i < px.length; i += 4) if (px[i] > 0) ink++;
			if (ink < 50) blank.push(fig.id + ": " + ink + " pixels drawn");
		});
		return blank;
	})()`, &blank)
	if len(blank) > 0 {
		t.Errorf("charts with nothing drawn: %q", blank)
	}
}

// checkTooltip hovers the first variant's timeline at second 1 and expects
// the busiest pod's exact calls that second in the tooltip.
func checkTooltip(t *testing.T, p *browsertest.Page, res *report.Result) {
	s := res.Variants[0].Summary
	sec := 1
	var pod string
	var calls int64 = -1
	for _, name := range podNames(s) {
		if tl := s.Timeline[name]; sec < len(tl) && tl[sec] > calls {
			pod, calls = name, tl[sec]
		}
	}
	want := fmt.Sprintf("p%d %s: %d calls/s", slices.Index(podNames(s), pod)+1, pod, calls)
	var at struct{ X, Y float64 }
	p.Eval(fmt.Sprintf(`(() => {
		const u = pinlabChart.plot("v0-timeline");
		u.root.scrollIntoView({block: "center"});
		const r = u.over.getBoundingClientRect();
		return {X: r.left + u.valToPos(%d, "x"), Y: r.top + r.height / 2};
	})()`, sec), &at)
	p.MouseMove(at.X, at.Y)
	p.WaitFor(fmt.Sprintf(`(() => { const tip = document.querySelector("#v0-timeline .tip"); return !tip.hidden && tip.textContent.includes(%q); })()`, want), 10*time.Second)
}

// checkKeyboard focuses the last window's bar chart, presses End, and
// expects the last pod's rate, as the result has it, read out.
func checkKeyboard(t *testing.T, p *browsertest.Page, res *report.Result) {
	s := res.Variants[0].Summary
	j := len(s.Windows) - 1
	w := s.Windows[j]
	pods := append(slices.Clone(w.Pods), w.OtherPods...)
	last := slices.MaxFunc(pods, func(a, b stats.PodStats) int { return a.Ordinal - b.Ordinal })
	want := fmt.Sprintf("p%d; rate: %s calls/s", last.Ordinal, strconv.FormatFloat(math.Round(last.Rate*10)/10, 'f', -1, 64))
	if !slices.ContainsFunc(w.Pods, func(p stats.PodStats) bool { return p.Name == last.Name }) {
		want = fmt.Sprintf("p%d; rate: none", last.Ordinal)
	}
	id := fmt.Sprintf("v0-w%d", j)
	p.Eval(fmt.Sprintf(`document.querySelector("#%s .plot").focus()`, id), nil)
	p.Keys(kb.End)
	p.WaitFor(fmt.Sprintf(`document.querySelector("#%s .readout").textContent.startsWith(%q)`, id, want), 10*time.Second)
}

// podNames are the variant's pods in order of creation, as the report
// numbers them.
func podNames(s stats.Summary) []string {
	var out []string
	for _, p := range s.Pods {
		if _, ok := s.Timeline[p.Name]; ok {
			out = append(out, p.Name)
		}
	}
	return out
}
