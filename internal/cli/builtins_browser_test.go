package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/browsertest"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/scenarios"
)

// Environment of TestBuiltinsInBrowser.
const (
	// builtinsEnv, set to 1, runs TestBuiltinsInBrowser: every built-in in
	// full, one after another, about 9 minutes on 2 cores.
	builtinsEnv = "PINLAB_BUILTINS_IN_BROWSER"
	// builtinsOutEnv names a directory to keep each built-in's result in,
	// as NAME.json.gz (-o json, gzipped); builtinResults is one.
	builtinsOutEnv = "PINLAB_BUILTINS_OUT"
)

// builtinResults holds a result of each built-in (NAME.json.gz) for
// TestBuiltinReports. Refresh it with
//
//	PINLAB_BUILTINS_IN_BROWSER=1 PINLAB_BUILTINS_OUT=$PWD/internal/cli/testdata/builtins go test ./internal/cli -run TestBuiltinsInBrowser -timeout 30m
const builtinResults = "testdata/builtins"

// TestBuiltinReports renders the saved result of every built-in scenario
// (builtinResults: kept from real runs on the 2-core machine, overloaded
// ones included, with their failed calls and not-ready pods) with pinlab
// report --html and opens it in headless Chromium: every chart the result
// calls for is drawn with its series and points, nothing is fetched and
// nothing errs. A built-in without a saved result fails the test.
func TestBuiltinReports(t *testing.T) {
	b := browsertest.New(t)
	for _, name := range scenarios.Names() {
		t.Run(name, func(t *testing.T) {
			saved := filepath.Join(t.TempDir(), name+".json")
			if err := os.WriteFile(saved, gunzipFile(t, filepath.Join(builtinResults, name+".json.gz")), 0o644); err != nil {
				t.Fatal(err)
			}
			checkSavedReport(t, b, saved)
		})
	}
}

// gunzipFile returns the content of the gzipped file path.
func gunzipFile(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (save one with TestBuiltinsInBrowser: see builtinResults)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return raw
}

// TestBuiltinsInBrowser runs every built-in scenario, in full (15 s to
// 75 s each), with --ui, --html and -o json, and opens both pages in
// headless Chromium. The dashboard goes live with one panel per variant,
// draws its charts, marks every timeline step done and says the run is
// over; the report draws every chart the result calls for, with the
// series and points of the result, and fetches nothing. Neither page
// logs a console error. A run that fails an expectation (exit 1 with a
// result) or is overloaded (exit 3) still has its pages checked.
//
// It takes about 9 minutes, so it runs only with PINLAB_BUILTINS_IN_BROWSER=1;
// -run 'TestBuiltinsInBrowser/NAME' picks built-ins; PINLAB_BUILTINS_OUT
// keeps the results. TestBuiltinScenarios (internal/runner) runs the same
// scenarios for their expectations.
func TestBuiltinsInBrowser(t *testing.T) {
	if os.Getenv(builtinsEnv) != "1" {
		t.Skipf("runs every built-in for about 9 minutes; set %s=1 to run it", builtinsEnv)
	}
	b := browsertest.New(t)
	keep := os.Getenv(builtinsOutEnv)
	for _, name := range scenarios.Names() {
		t.Run(name, func(t *testing.T) { checkBuiltin(t, b, name, keep) })
	}
}

// checkSavedReport renders a saved result with pinlab report --html and
// checks the page as checkBuiltin does.
func checkSavedReport(t *testing.T, b *browsertest.Browser, saved string) {
	raw, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	res, err := report.ReadJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: %v", saved, err)
	}
	html := filepath.Join(t.TempDir(), "report.html")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"report", saved, "--html", html}, &out, &errb); code != ExitOK {
		t.Fatalf("pinlab report %s: exit %d: %s", saved, code, errb.String())
	}
	checkReportPage(t, b, html, res)
}

// checkBuiltin runs built-in name with its dashboard, watches the
// dashboard, then checks the report; with keep set, it saves the result
// there as name.json.gz.
func checkBuiltin(t *testing.T, b *browsertest.Browser, name, keep string) {
	html := filepath.Join(t.TempDir(), name+".html")
	var out bytes.Buffer
	errb := &signalBuffer{on: "dashboard: ", seen: make(chan struct{})}
	args := []string{"lab", "run", name, "-o", "json", "--html", html, "--ui", "--progress", "off"}
	done := make(chan int, 1)
	start := time.Now()
	go func() { done <- run(context.Background(), args, &out, errb) }()
	select {
	case <-errb.seen:
	case code := <-done:
		t.Fatalf("lab run %s ended (exit %d) before serving its dashboard:\n%s", name, code, errb)
	case <-labtest.Context(t, 90*time.Second).Done():
		t.Fatalf("no dashboard address after 90s:\n%s", errb)
	}
	url := dashboardLine.FindStringSubmatch(errb.String())
	if url == nil {
		t.Fatalf("no dashboard address in %q", errb)
	}
	d := b.Open(t, url[1])
	d.WaitFor(`pinlabLive.state === "live" && pinlabLive.snapshots > 0`, browsertest.Timeout)
	var panels int
	d.Eval(`document.querySelectorAll("#panels section.panel").length`, &panels)

	code := <-done
	t.Logf("lab run %s: exit %d after %v", name, code, time.Since(start).Round(time.Second))
	if code != ExitOK && code != ExitError && code != ExitOverloaded {
		t.Fatalf("lab run %s: exit %d:\n%s", name, code, errb)
	}
	if keep != "" {
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		zw.Write(out.Bytes())
		zw.Close()
		if err := os.WriteFile(filepath.Join(keep, name+".json.gz"), gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := report.ReadJSON(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatalf("lab run %s, exit %d, wrote no result: %v\n%s", name, code, err, errb)
	}
	if panels != len(res.Variants) {
		t.Errorf("the dashboard has %d panels, want one per variant: %d", panels, len(res.Variants))
	}
	d.WaitFor(`pinlabLive.done && document.getElementById("status").textContent.startsWith("The run is over")`, browsertest.Timeout)
	var notDone []string
	d.Eval(`[...document.querySelectorAll("#panels section.panel")].flatMap(sec =>
		[...sec.querySelectorAll("ol.steps li:not(.done)")].map(li => sec.querySelector("h2").textContent + ": " + li.textContent))`, &notDone)
	if len(notDone) > 0 {
		t.Errorf("the dashboard shows steps not done at the end of the run: %q", notDone)
	}
	var drawn int
	d.Eval(`Object.keys(pinlabCharts).filter(id => id.startsWith("live-")).length`, &drawn)
	if drawn != 2*len(res.Variants) {
		t.Errorf("the dashboard drew %d charts, want 2 per variant: %d", drawn, 2*len(res.Variants))
	}
	if errs := d.Errors(); len(errs) > 0 {
		t.Errorf("dashboard console errors: %q", errs)
	}

	checkReportPage(t, b, html, res)
}

// checkReportPage opens the report html of res: every chart the result
// calls for is drawn, nothing is fetched, nothing errs.
func checkReportPage(t *testing.T, b *browsertest.Browser, html string, res *report.Result) {
	p := b.Open(t, "file://"+html)
	p.WaitFor(`window.pinlabRendered !== undefined`, browsertest.Timeout)
	checkCharts(t, p, wantCharts(res))
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("report console errors: %q", errs)
	}
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, "file://") && !strings.HasPrefix(u, "data:") {
			t.Errorf("the report requested %s; it must open offline", u)
		}
	}
	if fi, err := os.Stat(html); err == nil {
		t.Logf("%s: %.0f KB, %d variants, %s", res.Scenario, float64(fi.Size())/1000, len(res.Variants), verdicts(res))
	}
}

// verdicts counts a result's expectations by verdict, e.g. "3 PASS, 1 FAIL".
func verdicts(res *report.Result) string {
	var pass, fail, invalid, skipped int
	for _, v := range res.Variants {
		for _, c := range v.Checks {
			switch {
			case c.Skipped:
				skipped++
			case c.Invalid:
				invalid++
			case c.Pass:
				pass++
			default:
				fail++
			}
		}
	}
	return fmt.Sprintf("expectations: %d PASS, %d FAIL, %d INVALID, %d skipped", pass, fail, invalid, skipped)
}
