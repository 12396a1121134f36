package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/browsertest"
	"github.com/pinlab/pinlab/internal/stats"
)

// htmlSample is sample() with what the HTML report draws from: per-second
// timelines, failed calls, client connections, DNS lookups, steps and pod
// lifecycles, and offsets finer than the JSON's milliseconds.
func htmlSample() *Result {
	r := sample()
	for i := range r.Variants[:2] {
		s := &r.Variants[i].Summary
		s.End = stats.Offset(60e9)
		s.Timeline = map[string][]int64{}
		names := []string{"pricing-7d9f8-a", "pricing-7d9f8-b", "pricing-7d9f8-c", "pricing-7d9f8-d"}
		for k, name := range names {
			tl := make([]int64, 60)
			for sec := range tl {
				switch {
				case k < 2:
					tl[sec] = 500 - int64(i*250*min(sec/30, 1))
				case sec >= 11 && i == 1 && sec >= 30:
					tl[sec] = 250
				}
			}
			s.Timeline[name] = tl
			life := stats.PodLife{Name: name, IP: "127.244.0." + string(rune('2'+k)), Phases: []stats.PhaseChange{{Phase: stats.PodCreated, At: -2e9}, {Phase: stats.PodReady, At: -0.5e9}}}
			if k >= 2 {
				life.Phases = []stats.PhaseChange{{Phase: stats.PodCreated, At: 10.0012345e9}, {Phase: stats.PodReady, At: 10.6e9}}
			}
			s.Pods = append(s.Pods, life)
		}
		s.Steps = []stats.StepRecord{{At: 10.0012345e9, Text: "scale Deployment pricing to 4"}}
		s.DNS = []stats.DNSQuery{{At: 0.0123e9, Name: "pricing-headless.shop.svc.cluster.local.", Type: "A", Rcode: "NOERROR", Answers: 2}, {At: 30.0004e9, Name: "pricing-headless.shop.svc.cluster.local.", Type: "A", Rcode: "NOERROR", Answers: 4}}
		s.Clients = []stats.ClientStats{{Name: "order-0", IP: "127.244.0.9", Conns: []stats.Conn{
			{Remote: "127.244.0.2:8471", Opened: -0.2e9, Closed: off(30.5)},
			{Remote: "127.244.0.4:8471", Opened: 30.5006e9},
		}}}
	}
	s := &r.Variants[1].Summary
	s.FailedTimeline = make([]int64, 32)
	s.FailedTimeline[30], s.FailedTimeline[31] = 8, 4
	return r
}

func TestHTMLDataGolden(t *testing.T) {
	vcs, cc := charts(htmlSample())
	got, err := json.MarshalIndent(pageData{Charts: all(vcs, cc)}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "html-data.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)+"\n"); diff != "" {
		t.Errorf("the charts' data differ from %s (-want +got; rerun with -update if intended):\n%s", golden, diff)
	}
}

// TestHTMLFromJSON renders a result, and the same result written as JSON
// and read back (pinlab report RESULT.json --html), to the same page; one
// pod turns not ready at 9.0496 s, which the JSON keeps as 9.050 s (a page
// of the run that rounded 9.0496 to 9.0 s, and one of the JSON that
// rounded 9.050 to 9.1 s, differed so in the built-in scale-out's).
func TestHTMLFromJSON(t *testing.T) {
	sample := func() *Result {
		r := htmlSample()
		p := &r.Variants[0].Summary.Windows[0].Pods[0]
		p.Changes = append(p.Changes, stats.PhaseChange{Phase: stats.PodNotReady, At: 9.0496e9})
		return r
	}
	var direct, saved, back bytes.Buffer
	if err := HTML(&direct, sample()); err != nil {
		t.Fatal(err)
	}
	if err := JSON(&saved, sample()); err != nil {
		t.Fatal(err)
	}
	r, err := ReadJSON(&saved)
	if err != nil {
		t.Fatal(err)
	}
	if err := HTML(&back, r); err != nil {
		t.Fatal(err)
	}
	if direct.String() != back.String() {
		t.Errorf("the page rendered from the JSON differs from the page rendered from the run:\n%s", cmp.Diff(direct.String(), back.String()))
	}
}

func TestHTMLSelfContained(t *testing.T) {
	var buf bytes.Buffer
	if err := HTML(&buf, htmlSample()); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, tc := range []struct {
		name string
		re   string
	}{
		{"script loaded from elsewhere", `<script[^>]+src=`},
		{"style sheet or resource linked from elsewhere", `<link[^>]+href="(?:https?:)?//`},
		{"image from elsewhere", `<img[^>]+src="(?:https?:)?//`},
		{"import", `@import`},
	} {
		if m := regexp.MustCompile(tc.re).FindString(page); m != "" {
			t.Errorf("%s: %q", tc.name, m)
		}
	}
	for _, want := range []string{
		`content="default-src 'none'; script-src 'unsafe-inline'`, // no fetch of any kind
		`<script type="application/json" id="pinlab-data">{"charts":[`,
		`var uPlot=`,
		`window.pinlabChart =`,
		`<span class="badge FAIL">FAIL</span>`, `<span class="badge INVALID">INVALID</span>`, `<span class="badge SKIP">SKIP</span>`,
		`<strong>OVERLOADED:</strong> variant headless-rr-age, window settled`,
		`prefers-color-scheme: dark`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n, want := strings.Count(page, `<figure class="chart `), len(mustCharts(htmlSample())); n != want {
		t.Errorf("%d chart figures in the page, want one per chart in its data: %d", n, want)
	}
}

func mustCharts(r *Result) []string {
	vcs, cc := charts(r)
	var ids []string
	for _, c := range all(vcs, cc) {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestHTMLEscapes keeps names from the scenario file out of the markup and
// the script: they are text.
func TestHTMLEscapes(t *testing.T) {
	r := htmlSample()
	r.Description = `<img src=x onerror=alert(1)>`
	r.Variants[0].Summary.Steps[0].Text = `</script><script>alert(1)</script>`
	var buf bytes.Buffer
	if err := HTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`<img src=x`, `</script><script>alert(1)`} {
		if strings.Contains(buf.String(), bad) {
			t.Errorf("the page contains %q unescaped", bad)
		}
	}
}

// TestHTMLInBrowser opens the sample's page, with its failed and
// interrupted variants, in headless Chromium: every chart of the data is
// drawn and nothing errs.
func TestHTMLInBrowser(t *testing.T) {
	b := browsertest.New(t)
	path := filepath.Join(t.TempDir(), "report.html")
	var buf bytes.Buffer
	if err := HTML(&buf, htmlSample()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p := b.Open(t, "file://"+path)
	p.WaitFor(`window.pinlabRendered !== undefined`, browsertest.Timeout)
	var ids []string
	p.Eval(`Object.keys(pinlabCharts).sort()`, &ids)
	want := mustCharts(htmlSample())
	slices.Sort(want)
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("charts drawn (-want +got):\n%s", diff)
	}
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestRunSeconds: the per-second charts span the run, and a later second
// only when calls were served or failed in it.
func TestRunSeconds(t *testing.T) {
	tests := []struct {
		name        string
		interrupted float64
		timeline    []int64
		failed      []int64
		want        int
	}{
		{name: "a bucket after the run, empty", timeline: append(make([]int64, 60), 0), want: 60},
		{name: "calls that ended after the run", timeline: append(make([]int64, 60), 3), want: 61},
		{name: "failures after the run", timeline: make([]int64, 61), failed: append(make([]int64, 61), 2), want: 62},
		{name: "shorter than the run", timeline: make([]int64, 12), want: 60},
		{name: "interrupted", interrupted: 12.5, timeline: append(make([]int64, 13), 0), want: 13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Variant{Interrupted: tt.interrupted}
			v.Summary.Timeline = map[string][]int64{"p": tt.timeline}
			v.Summary.FailedTimeline = tt.failed
			if got := runSeconds(v, &Result{Duration: 60}); got != tt.want {
				t.Errorf("runSeconds = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestHTMLClusterRun: a cluster run's page says so and names its API
// server, and claims neither the lab's DNS settings and log nor the pods'
// own connection counts, which a cluster run does not observe.
func TestHTMLClusterRun(t *testing.T) {
	for _, tt := range []struct {
		cluster   string
		want, not []string
	}{
		{"", []string{"pinlab lab run: ", "DNS TTL", "cluster DNS lookups answered", " client connections; "}, []string{"pinlab cluster run"}},
		{"https://10.0.0.1:6443", []string{"pinlab cluster run: ", "the API server https://10.0.0.1:6443", "DNS: the cluster&#39;s own", "client connections not observed on a cluster"},
			[]string{"pinlab lab run", "DNS TTL", "cluster DNS lookups answered", " client connections; ", "DNS lookups</h3>"}},
	} {
		t.Run("cluster="+tt.cluster, func(t *testing.T) {
			r := htmlSample()
			r.Cluster = tt.cluster
			var buf bytes.Buffer
			if err := HTML(&buf, r); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("the page lacks %q", w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(buf.String(), w) {
					t.Errorf("the page has %q", w)
				}
			}
		})
	}
}
