package report

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinlab/pinlab/internal/browsertest"
)

// screenshotEnv names a result of the built-in scale-out saved with
// -o json; with it, TestScreenshot draws the README's picture.
const screenshotEnv = "PINLAB_SCREENSHOT"

// screenshotPath is the README's picture, from this package's directory.
const screenshotPath = "../../docs/report-scale-out.png"

// screenshotArea is what the picture shows: from the first variant's
// heading (scale-out's clusterip) down to its per-pod bars of each window,
// the calls/s per pod per second between.
const screenshotArea = "#variant-0-h, #variant-0 > div.grid"

// TestScreenshot renders the HTML report of a saved scale-out result
// (PINLAB_SCREENSHOT=result.json), opens it in headless Chromium at
// 1280x1000 in light mode, and writes screenshotArea to
// docs/report-scale-out.png. It fails on a console error or a result of
// another scenario. Without PINLAB_SCREENSHOT it skips.
//
//	./pinlab lab run -o json > /tmp/scale-out.json
//	PINLAB_SCREENSHOT=/tmp/scale-out.json go test ./internal/report -run TestScreenshot
func TestScreenshot(t *testing.T) {
	in := os.Getenv(screenshotEnv)
	if in == "" {
		t.Skipf("set %s to a saved scale-out result (-o json) to draw %s", screenshotEnv, screenshotPath)
	}
	raw, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ReadJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if res.Scenario != "scale-out" || len(res.Variants) == 0 || len(res.Windows) < 2 {
		t.Fatalf("%s: a result of scenario %q with %d variants and %d windows; want the built-in scale-out's", in, res.Scenario, len(res.Variants), len(res.Windows))
	}
	var page bytes.Buffer
	if err := HTML(&page, res); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(html, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	b := browsertest.New(t)
	p := b.Open(t, "file://"+html)
	p.ColorScheme("light")
	p.WaitFor(`window.pinlabRendered !== undefined`, browsertest.Timeout)
	png := p.Screenshot(screenshotArea)
	if errs := p.Errors(); len(errs) > 0 {
		t.Fatalf("console errors: %q", errs)
	}
	if err := os.WriteFile(screenshotPath, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d KB) from %s", screenshotPath, len(png)/1000, in)
}
