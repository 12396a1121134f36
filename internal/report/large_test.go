package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/browsertest"
	"github.com/pinlab/pinlab/internal/stats"
)

// largeResult synthesises the result of a 1-hour scale-out with the given
// variants: pods pods (half of them added at 10 minutes), 8 clients
// reconnecting every 10 s, a DNS lookup every 30 s and a minute of errors,
// with the per-second figures varying as a real run's do.
func largeResult(variants, pods int) *Result {
	const secs = 3600
	r := &Result{Scenario: "large", Source: "synthetic", Duration: secs, Seed: 1, SideBySide: true, MinResolve: 30, DNSTTL: 5,
		Windows: []WindowSpec{{Name: "before", From: 60, To: 600}, {Name: "after", From: 660, To: 1800}, {Name: "settled", From: 1900, To: 3600}},
		Steps:   []string{fmt.Sprintf("10m0s: scale Deployment pricing to %d", pods)}}
	for v := range variants {
		s := stats.Summary{End: stats.Offset(secs * time.Second), Timeline: map[string][]int64{}, FailedTimeline: make([]int64, secs),
			Steps: []stats.StepRecord{{At: stats.Offset(600 * time.Second), Text: r.Steps[0]}}}
		var podStats []stats.PodStats
		for p := range pods {
			name := fmt.Sprintf("pricing-6bc7695dfb-%05d", p)
			ready := -0.5
			if p >= pods/2 {
				ready = 600.4
				s.Rebalance = append(s.Rebalance, stats.Rebalance{Pod: name, ReadyAt: stats.Offset(ready * float64(time.Second)), After: f(31.2 + float64(p%7)), Survived: true})
			}
			s.Pods = append(s.Pods, stats.PodLife{Name: name, IP: fmt.Sprintf("127.244.%d.%d", p/250, p%250+2),
				Phases: []stats.PhaseChange{{Phase: stats.PodReady, At: stats.Offset(ready * float64(time.Second))}}})
			tl := make([]int64, secs)
			for t := range tl {
				if ready < float64(t) {
					tl[t] = int64(8000/pods) + int64((t*31+p*17+v*7)%23) - 11
				}
			}
			s.Timeline[name] = tl
			podStats = append(podStats, stats.PodStats{Name: name, IP: "127.244.0.2", Ordinal: p + 1, Calls: 100000, Rate: 160.3, Share: 1 / float64(pods), ReadyAt: f(ready), State: stats.PodReady})
		}
		for _, w := range r.Windows {
			s.Windows = append(s.Windows, stats.WindowStats{Name: w.Name, From: w.From, To: w.To, Pods: podStats, Rate: 8000, Calls: 1000000, Jain: 0.99, MaxMean: 1.01, Errors: map[string]int64{}})
		}
		for c := range 8 {
			cs := stats.ClientStats{Name: fmt.Sprintf("order-%d", c)}
			for t := 0; t < secs; t += 10 {
				closed := stats.Offset(time.Duration(t+10) * time.Second)
				cs.Conns = append(cs.Conns, stats.Conn{Remote: "127.244.0.2:8471", Opened: stats.Offset(time.Duration(t) * time.Second), Closed: &closed})
			}
			s.Clients = append(s.Clients, cs)
		}
		for t := 0; t < secs; t += 30 {
			s.DNS = append(s.DNS, stats.DNSQuery{At: stats.Offset(time.Duration(t) * time.Second), Name: "pricing-headless.shop.svc.cluster.local.", Type: "A", Rcode: "NOERROR", Answers: pods})
		}
		for t := 1200; t < 1260; t++ {
			s.FailedTimeline[t] = int64(t % 13)
		}
		s.ErrorWindows = []stats.ErrorWindow{{From: stats.Offset(1200 * time.Second), To: stats.Offset(1260 * time.Second), Failed: 360, ByCode: map[string]int64{"Unavailable": 360}, ByCause: map[string]int64{"refused": 360}}}
		r.Variants = append(r.Variants, Variant{Name: fmt.Sprintf("variant-%d", v), State: "done", Summary: s})
	}
	return r
}

// MaxHTMLBytes is the size a 1-hour, 50-pod report must stay under: 5 MiB
// (5,242,880 bytes).
const MaxHTMLBytes = 5 << 20

// TestLargeReportSize renders a 1-hour run with 50 pods, five variants side
// by side as the built-in scale-out runs them, and bounds the file's size.
func TestLargeReportSize(t *testing.T) {
	var buf bytes.Buffer
	if err := HTML(&buf, largeResult(5, 50)); err != nil {
		t.Fatal(err)
	}
	t.Logf("1 hour, 50 pods, 5 variants: %d bytes (%.2f MiB)", buf.Len(), float64(buf.Len())/(1<<20))
	if buf.Len() >= MaxHTMLBytes {
		t.Errorf("the report is %d bytes, want under %d", buf.Len(), MaxHTMLBytes)
	}
}

// BenchmarkLargeReportOpen measures how long headless Chromium takes to open
// the report of a 1-hour run with 50 pods, from navigation to every chart
// drawn (ms/open), and the file's size; -benchtime 3x is plenty. Set
// PINLAB_BENCH_VARIANTS to change the number of variants (default 5).
func BenchmarkLargeReportOpen(b *testing.B) {
	variants := 5
	if v := os.Getenv("PINLAB_BENCH_VARIANTS"); v != "" {
		fmt.Sscan(v, &variants)
	}
	path := filepath.Join(b.TempDir(), "large.html")
	var buf bytes.Buffer
	start := time.Now()
	if err := HTML(&buf, largeResult(variants, 50)); err != nil {
		b.Fatal(err)
	}
	render := time.Since(start)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	br := browsertest.New(b)
	b.ResetTimer()
	var total time.Duration
	var inPage float64
	for range b.N {
		t0 := time.Now()
		p := br.Open(b, "file://"+path)
		p.WaitFor(`window.pinlabRendered !== undefined`, browsertest.Timeout)
		total += time.Since(t0)
		var ms float64
		p.Eval(`window.pinlabRendered.ms`, &ms)
		inPage += ms
		if errs := p.Errors(); len(errs) > 0 {
			b.Fatalf("console errors: %q", errs)
		}
	}
	// ms/open counts from asking for a new tab to every chart painted;
	// ms/navigation from the page's navigation start (performance.now()).
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/open")
	b.ReportMetric(inPage/float64(b.N), "ms/navigation")
	b.ReportMetric(float64(buf.Len())/(1<<20), "MiB")
	b.ReportMetric(float64(render.Milliseconds()), "ms-render-go")
}
