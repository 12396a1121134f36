package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"
	"github.com/pinlab/pinlab/internal/browsertest"
	"github.com/pinlab/pinlab/internal/labtest"
)

var dashboardLine = regexp.MustCompile(`dashboard: (http://127\.0\.0\.1:\d+/#token=[A-Za-z0-9_-]+)`)

// TestRunDashboardInBrowser runs a short scale-out with --ui and watches
// its dashboard in headless Chromium: it goes live, shows the two pods,
// then, after the scale step, the step done and four pods; at the end it
// says the run is over. Nothing errs in the console.
func TestRunDashboardInBrowser(t *testing.T) {
	b := browsertest.New(t)
	errb := &signalBuffer{on: "dashboard: ", seen: make(chan struct{})}
	var out bytes.Buffer
	opts := &LabRunOptions{File: writeScenario(t, 14*time.Second, 7*time.Second), Output: "json", Progress: "off", LogLevel: "off",
		UI: true, UIAddr: DefaultUIAddr, Out: &out, Err: errb}
	done := make(chan error, 1)
	go func() { done <- labRun(context.Background(), opts) }()
	select {
	case <-errb.seen:
	case err := <-done:
		t.Fatalf("lab run ended before serving its dashboard: %v\n%s", err, errb)
	case <-labtest.Context(t, 60*time.Second).Done():
		t.Fatalf("no dashboard address after 60s:\n%s", errb)
	}
	url := dashboardLine.FindStringSubmatch(errb.String())
	if url == nil {
		t.Fatalf("no dashboard address in %q", errb)
	}
	p := b.Open(t, url[1])
	p.WaitFor(`pinlabLive.state === "live" && pinlabLive.snapshots > 0`, 30*time.Second)
	var hash string
	p.Eval(`location.hash`, &hash)
	if hash != "" {
		t.Errorf("the token stays in the address bar (%q); the page should drop it", hash)
	}
	p.WaitFor(`pinlabLive.pods["clusterip"] === 2 && pinlabLive.steps["clusterip"] === 0`, 60*time.Second)
	// The step's event and the pods it creates reach the page at the next
	// tick (500 ms); the deadlines are generous for a busy machine.
	p.WaitFor(`pinlabLive.steps["clusterip"] === 1`, 60*time.Second)
	stepSeen := time.Now()
	p.WaitFor(`pinlabLive.pods["clusterip"] === 4 && pinlabCharts["live-0-rates"].points === 4 &&
		pinlabCharts["live-0-rates"].series === 1 && pinlabCharts["live-0-history"].series === 4 &&
		document.querySelectorAll("#panel-0 table.pods tbody tr").length === 4 &&
		[...document.querySelectorAll("#events li")].some(li => li.textContent.includes("scale Deployment pricing to 4"))`, 30*time.Second)
	t.Logf("the page showed the 4 pods %v after it showed the step", time.Since(stepSeen).Round(time.Millisecond))
	// The bound: the page shows the scale step and the pods it made
	// within 2 s of the step, by the wall clock the browser and pinlab share.
	var lag struct{ Step, Pods float64 }
	p.Eval(`(() => {
		const [, e] = Object.entries(pinlabLive.shown).find(([k]) => k.startsWith("clusterip: ") && k.includes("scale Deployment pricing to 4"));
		return {Step: e.shown - e.at, Pods: pinlabLive.podsShown["clusterip"][4] - e.at};
	})()`, &lag)
	t.Logf("the scale step showed %.0f ms after it ran, its 4 pods %.0f ms after", lag.Step, lag.Pods)
	if lag.Step > 2000 || lag.Pods > 2000 || lag.Step < 0 {
		t.Errorf("the page showed the scale step %.0f ms and its pods %.0f ms after the step ran; want within 2000 ms", lag.Step, lag.Pods)
	}
	var rate float64
	p.Eval(`Number(document.querySelector("#panel-0 table.pods tbody tr td:nth-child(5)").textContent)`, &rate)
	var served int
	p.Eval(`pinlabCharts["live-0-history"].points`, &served)
	if served < 2 {
		t.Errorf("the calls/s-over-time chart has %d points, want one a second", served)
	}
	var axis struct{ Max, Last float64 }
	p.Eval(`(() => { const u = pinlabChart.plot("live-0-history"); return {Max: u.scales.x.max, Last: u.data[0][u.data[0].length - 1]}; })()`, &axis)
	if axis.Max < axis.Last {
		t.Errorf("the calls/s-over-time chart's axis ends at %gs, before its last point at %gs: it does not follow the new data", axis.Max, axis.Last)
	}
	if err := <-done; err != nil {
		t.Fatalf("lab run: %v\n%s", err, errb)
	}
	p.WaitFor(`pinlabLive.done && document.getElementById("status").textContent.startsWith("The run is over") && !document.getElementById("final").hidden`, 30*time.Second)
	t.Run("tooltip", func(t *testing.T) { checkLiveTooltip(t, p) })
	t.Run("keyboard", func(t *testing.T) {
		// End on the bars reads out the last pod, p4.
		p.Eval(`document.querySelector("#live-0-rates .plot").focus()`, nil)
		p.Keys(kb.End)
		p.WaitFor(`document.querySelector("#live-0-rates .readout").textContent.startsWith("p4; rate: ")`, 10*time.Second)
	})
	t.Run("dark", func(t *testing.T) {
		p.ColorScheme("dark")
		p.WaitFor(`getComputedStyle(document.documentElement).backgroundColor === "rgb(18, 21, 27)" && pinlabCharts["live-0-rates"].points === 4`, 10*time.Second)
	})
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
	t.Logf("p1's last rate on the page: %g calls/s", rate)
}

// checkLiveTooltip hovers p1's bar of the first panel's calls/s chart,
// once the run is over and the figures stay, and expects in the tooltip
// the exact rate and calls that p1's row in the pods table shows.
func checkLiveTooltip(t *testing.T, p *browsertest.Page) {
	var row struct{ Name, Rate, Calls string }
	p.Eval(`(() => { const td = document.querySelector("#panel-0 table.pods tbody tr").children; return {Name: td[1].textContent, Rate: td[4].textContent, Calls: td[5].textContent}; })()`, &row)
	var at struct{ X, Y float64 }
	p.Eval(`(() => {
		const u = pinlabChart.plot("live-0-rates");
		u.root.scrollIntoView({block: "center"});
		const r = u.over.getBoundingClientRect();
		return {X: r.left + u.valToPos(0, "x"), Y: r.top + r.height / 2};
	})()`, &at)
	p.MouseMove(at.X, at.Y)
	want := []string{"p1", "rate: " + row.Rate + " calls/s", row.Name, "; " + row.Calls + " calls so far"}
	js, _ := json.Marshal(want)
	p.WaitFor(fmt.Sprintf(`(() => { const tip = document.querySelector("#live-0-rates .tip"); return !tip.hidden && %s.every(w => tip.textContent.includes(w)); })()`, js), 10*time.Second)
}

// upManifest is a Deployment of two pricing pods behind a Service.
const upManifest = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: pricing, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: pricing}}
  template:
    metadata: {labels: {app: pricing}}
    spec:
      containers:
      - name: pricing
        image: pinlab
        args: [pod, pricing]
        ports: [{name: grpc, containerPort: 8471}]
        readinessProbe: {grpc: {port: 8471}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: pricing, namespace: shop}
spec:
  selector: {app: pricing}
  ports: [{name: grpc, port: 8471, targetPort: grpc}]
`

// headlessPricing is a headless Service for upManifest's pricing pods.
const headlessPricing = `---
apiVersion: v1
kind: Service
metadata: {name: pricing-headless, namespace: shop}
spec:
  clusterIP: None
  selector: {app: pricing}
  ports: [{name: grpc, port: 8471, targetPort: grpc}]
`

// TestLabDashboardInBrowser runs lab up --ui and drives the lab from its
// dashboard in headless Chromium: the objects show as lab get shows them,
// and the buttons scale the Deployment, force a pod not ready and delete
// one, through the control API with the page's token.
func TestLabDashboardInBrowser(t *testing.T) {
	b := browsertest.New(t)
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, []byte(upManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startLabUp(t, path, func(o *LabUpOptions) { o.UI = true })
	url := dashboardLine.FindStringSubmatch(u.out.String())
	if url == nil {
		t.Fatalf("no dashboard address in %q", u.out)
	}
	if !strings.HasPrefix(url[1], "http://"+u.opts.Control+"/#token=") {
		t.Errorf("dashboard %s is not on the control API's address %s", url[1], u.opts.Control)
	}
	p := b.Open(t, url[1])
	pods := `document.querySelectorAll('table[data-kind="Pod"] tbody tr')`
	p.WaitFor(pods+`.length === 2 && pinlabLive.state === "live"`, 30*time.Second)

	// Scale to 3 with the Deployment's row: type the replicas, click.
	p.Eval(`(() => { const i = document.querySelector('table[data-kind="Deployment"] tbody tr input'); i.value = "3"; })()`, nil)
	p.Click(`table[data-kind="Deployment"] tbody tr button`)
	p.WaitFor(`pinlabLive.verbs.length === 1`, 30*time.Second)
	checkVerb(t, p, 0, "/v1/scale")
	p.WaitFor(pods+`.length === 3 && pinlabLive.pods["lab"] === 3`, 60*time.Second)

	// Not ready: the pod's READY column goes 0/1 and the event shows.
	var victim string
	p.Eval(pods+`[0].dataset.key`, &victim)
	p.Click(`table[data-kind="Pod"] tbody tr button[aria-label^="make pod"]`)
	p.WaitFor(`pinlabLive.verbs.length === 2`, 30*time.Second)
	checkVerb(t, p, 1, "/v1/ready")
	name := victim[strings.IndexByte(victim, '/')+1:]
	p.WaitFor(fmt.Sprintf(`[...%s].some(tr => tr.dataset.key === %q && tr.children[2].textContent === "0/1") &&
		[...document.querySelectorAll("#events li")].some(li => li.textContent.includes("pod %s") && li.textContent.includes("not-ready"))`, pods, victim, name), 30*time.Second)

	// Delete: the pod goes, a new one comes.
	p.Click(`table[data-kind="Pod"] tbody tr button[aria-label^="delete pod"]`)
	p.WaitFor(`pinlabLive.verbs.length === 3`, 30*time.Second)
	checkVerb(t, p, 2, "/v1/delete")
	p.WaitFor(fmt.Sprintf(`![...%s].some(tr => tr.dataset.key === %q)`, pods, victim), 60*time.Second)

	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
	// The same call from the page without the token is refused.
	var status int
	p.Eval(`fetch("/v1/scale", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => r.status)`, &status)
	if status != 401 {
		t.Errorf("a verb without the token: %d, want 401", status)
	}
	if err := u.stop(); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(`pinlabLive.done && document.getElementById("status").textContent === "The lab has stopped."`, 30*time.Second)
}

// checkVerb checks the page's i-th control call: path, answered 200.
func checkVerb(t *testing.T, p *browsertest.Page, i int, path string) {
	t.Helper()
	var v struct {
		Path    string
		Status  int
		Message string
	}
	p.Eval(fmt.Sprintf(`pinlabLive.verbs[%d]`, i), &v)
	if v.Path != path || v.Status != 200 {
		t.Fatalf("call %d: %s answered %d %q, want %s answered 200", i, v.Path, v.Status, v.Message, path)
	}
}
