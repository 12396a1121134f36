// Package browsertest opens pages in a real headless Chromium for tests,
// driven through the DevTools protocol over a pipe (chromedp): evaluate
// script, move the mouse, press keys, and collect every console error and
// uncaught exception of the page.
//
// Chromium is found as $PINLAB_CHROMIUM, else as chromium,
// chromium-browser, google-chrome or google-chrome-stable on PATH. Without
// it, New skips the test with a message saying how to install it, unless
// PINLAB_REQUIRE_CHROMIUM=1 (set by .ci/run), when it fails the test.
//
// The browser never reaches the network: it runs with background
// networking, component updates, sync and QUIC off, a fresh profile,
// every host name but 127.0.0.1 resolving to nothing and a proxy on a closed loopback
// port for anything not on loopback, so pages can load file:// URLs and
// servers on 127.0.0.1 only.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// RequireEnv makes a missing Chromium a test failure instead of a skip.
const RequireEnv = "PINLAB_REQUIRE_CHROMIUM"

// Timeout bounds each step of a test in the browser; generous, since the
// test machines are small and busy.
const Timeout = 60 * time.Second

// Path returns the Chromium executable, or "" when there is none.
func Path() string {
	if p := os.Getenv("PINLAB_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Flags are Chromium's command-line flags for the tests: headless, no
// network, a fresh profile in dir.
func Flags(dir string) []string {
	return []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + dir,
		"--disable-default-apps", "--disable-extensions", "--disable-breakpad", "--disable-domain-reliability",
		"--disable-client-side-phishing-detection", "--no-pings", "--metrics-recording-only",
		"--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--proxy-server=http://127.0.0.1:9", // the discard port: nothing listens, anything proxied fails
		"--hide-scrollbars", "--mute-audio", "--force-color-profile=srgb",
	}
}

// Browser is a headless Chromium, closed when the test ends.
type Browser struct {
	ctx context.Context // the browser's first tab; new tabs derive from it
}

// New starts Chromium for t, or skips t when there is none (see the package
// doc).
func New(t testing.TB) *Browser {
	t.Helper()
	path := Path()
	if path == "" {
		msg := "no Chromium: install it (Debian: apt-get install -y chromium) or set PINLAB_CHROMIUM to its path"
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%s (%s is set, so the browser tests must run)", msg, RequireEnv)
		}
		t.Skip(msg)
	}
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.WindowSize(1280, 1000)}
	for _, f := range Flags(t.TempDir()) {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if hasValue {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	start(t, ctx, "starting "+path)
	return &Browser{ctx: ctx}
}

// start makes the first Run on ctx, which creates the browser or the tab:
// what it creates lives as long as the context of that Run, so the Run
// gets ctx itself, and the wait for it is bounded here instead.
func start(t testing.TB, ctx context.Context, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("browsertest: %s: %v", what, err)
		}
	case <-time.After(Timeout):
		t.Fatalf("browsertest: %s: not done within %v", what, Timeout)
	}
}

// Page is one tab.
type Page struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	errors   []string
	requests []string
}

// Open opens url in a new tab and waits for it to load; the tab closes when
// the test ends.
func (b *Browser) Open(t testing.TB, url string) *Page {
	t.Helper()
	p := &Page{t: t}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(p.listen))
	t.Cleanup(cancel)
	p.ctx = ctx
	start(t, ctx, "opening a tab")
	p.do(chromedp.Navigate(url))
	return p
}

// listen records the page's console errors and uncaught exceptions.
func (p *Page) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var args []string
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		msg = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "uncaught: " + d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		msg += fmt.Sprintf(" (%s:%d)", d.URL, d.LineNumber)
	case *network.EventRequestWillBeSent:
		p.mu.Lock()
		p.requests = append(p.requests, ev.Request.URL)
		p.mu.Unlock()
		return
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError {
			return
		}
		msg = fmt.Sprintf("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	default:
		return
	}
	p.mu.Lock()
	p.errors = append(p.errors, msg)
	p.mu.Unlock()
}

// Errors returns the console errors and uncaught exceptions so far.
func (p *Page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

// Requests returns the URLs the page requested so far (the network domain
// sees every request, file:// and data: included).
func (p *Page) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// do runs steps with the step timeout, failing the test on error.
func (p *Page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("browsertest: %v", err)
	}
}

// Eval evaluates a script expression (awaiting a promise) and decodes its
// JSON value into out (nil: ignore it).
func (p *Page) Eval(expr string, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[*runtime.RemoteObject](expr, chromedp.EvalAwaitPromise, chromedp.EvalAsValue))
	if err != nil {
		p.t.Fatalf("browsertest: evaluating %q: %v", expr, err)
	}
	if out == nil {
		return
	}
	if err := decode(v, out); err != nil {
		p.t.Fatalf("browsertest: evaluating %q: %v", expr, err)
	}
}

// WaitFor polls a script expression until it is truthy, for at most d;
// it fails the test with what the expression says when it never is.
func (p *Page) WaitFor(expr string, d time.Duration) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		p.t.Fatalf("browsertest: waiting %v for %s: %v (page errors: %q)", d, expr, err, p.Errors())
	}
}

// MouseMove moves the mouse to the viewport's x, y (CSS pixels).
func (p *Page) MouseMove(x, y float64) {
	p.t.Helper()
	p.do(chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x, y))
}

// Click clicks the element the CSS selector finds first.
func (p *Page) Click(selector string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.CSS(selector)))
}

// Keys sends key presses to the focused element; use chromedp/kb's names
// for keys such as kb.ArrowRight.
func (p *Page) Keys(keys string) {
	p.t.Helper()
	p.do(chromedp.KeyEvent(keys))
}

// ColorScheme emulates prefers-color-scheme: "light" or "dark".
func (p *Page) ColorScheme(scheme string) {
	p.t.Helper()
	p.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		return err
	}))
}

// Screenshot returns a PNG of the smallest box that holds every element
// the CSS selector finds (all of them, e.g. "h1, #v0-timeline"), at the
// page's size in CSS pixels (scale 1), beyond the viewport if need be.
func (p *Page) Screenshot(selector string) []byte {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSSAll(selector)))
	if err != nil {
		p.t.Fatalf("browsertest: screenshot of %q: %v", selector, err)
	}
	return png
}

// decode decodes a value returned by value into out.
func decode(v *runtime.RemoteObject, out any) error {
	if v == nil || len(v.Value) == 0 {
		return fmt.Errorf("no value (type %s)", typeOf(v))
	}
	return json.Unmarshal(v.Value, out)
}

func typeOf(v *runtime.RemoteObject) string {
	if v == nil {
		return "none"
	}
	return string(v.Type)
}
