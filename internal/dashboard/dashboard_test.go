package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/stats"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a manual clock for the board.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func fakeClock(t *testing.T) *clock {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	old := now
	now = c.now
	t.Cleanup(func() { now = old })
	return c
}

// lastSnapshot decodes the board's last published snapshot.
func lastSnapshot(t *testing.T, b *Board) snapshot {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var s snapshot
	if err := json.Unmarshal(b.last, &s); err != nil {
		t.Fatalf("snapshot %s: %v", b.last, err)
	}
	return s
}

func TestBoard(t *testing.T) {
	clk := fakeClock(t)
	b := New(Config{Title: "t", Panels: []Panel{{Name: "clusterip", Duration: 60 * time.Second,
		Steps: []Step{{At: 10 * time.Second, Text: "10s: scale Deployment pricing to 4"}}}}})
	b.Progress([]outcome.Progress{{Variant: "clusterip", State: "running", Elapsed: 0, Duration: time.Minute}})
	b.Event(0, outcome.LiveEvent{At: clk.now(), Pod: "pricing-a", IP: "127.244.0.2", Phase: stats.PodReady})
	b.Event(0, outcome.LiveEvent{At: clk.now(), Pod: "pricing-b", IP: "127.244.0.3", Phase: stats.PodReady})
	b.Conn(0, "order-0", true)
	b.Conn(0, "order-1", true)
	b.publish(false)
	for range 4 { // two seconds at 500 ms ticks: p1 serves 500/s, p2 250/s
		clk.add(500 * time.Millisecond)
		for range 250 {
			b.Served(0, "pricing-a")
		}
		for range 125 {
			b.Served(0, "pricing-b")
		}
		b.publish(false)
	}
	clk.add(500 * time.Millisecond)
	b.Event(0, outcome.LiveEvent{At: clk.now(), Text: "10s: scale Deployment pricing to 4"})
	b.Event(0, outcome.LiveEvent{At: clk.now(), Pod: "pricing-c", Phase: stats.PodCreated})
	b.Conn(0, "order-1", false)
	b.Conn(0, "order-1", true)
	b.publish(false)

	s := lastSnapshot(t, b)
	p := s.Panels[0]
	wantPods := []podSnap{
		{Label: "p1", Name: "pricing-a", IP: "127.244.0.2", Phase: "ready", Calls: 1000, Rate: 250}, // nothing in the last 500 ms
		{Label: "p2", Name: "pricing-b", IP: "127.244.0.3", Phase: "ready", Calls: 500, Rate: 125},
		{Label: "p3", Name: "pricing-c", Phase: "created"},
	}
	if diff := cmp.Diff(wantPods, p.Pods); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]clientSnap{{"order-0", 1, 1}, {"order-1", 1, 2}}, p.Clients); diff != "" {
		t.Errorf("clients (-want +got):\n%s", diff)
	}
	if !p.Steps[0].Done {
		t.Errorf("the step is not done after its event: %+v", p.Steps)
	}
	if got := p.History.Series[0].Values; len(got) != 3 || got[1] != 500 || got[2] != 500 {
		t.Errorf("p1's history %v, want a point a second: 0, then 500 calls/s twice", got)
	}
	if got := p.Rates.Series[0].Values; len(got) != 3 || got[0] != 250 || len(p.Rates.Categories) != 3 {
		t.Errorf("rates chart %v %v, want 3 bars, p1 at 250", got, p.Rates.Categories)
	}
	var texts []string
	for _, e := range s.Events {
		texts = append(texts, e.Text)
	}
	if e := s.Events[2]; e.At != 2.5 || e.Time != clk.now().UnixMilli() {
		t.Errorf("the step's event at %gs, time %d ms; want 2.5s from the start, at %d ms (the clock's now)", e.At, e.Time, clk.now().UnixMilli())
	}
	want := []string{"pod pricing-a (127.244.0.2) ready", "pod pricing-b (127.244.0.3) ready", "step 10s: scale Deployment pricing to 4", "pod pricing-c created"}
	if diff := cmp.Diff(want, texts); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestStream: a page gets the latest snapshot at once, then each new one,
// and an end event when the board is done; the stream then ends.
func TestStream(t *testing.T) {
	b := New(Config{Title: "stream", Panels: []Panel{{Name: "lab"}}, Tick: 10 * time.Millisecond})
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		b.Run(ctx)
	}()
	resp, err := http.Get(srv.URL + StreamPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	events := bufio.NewScanner(resp.Body)
	events.Buffer(nil, 1<<20)
	next := func() (name string, s snapshot) {
		t.Helper()
		for events.Scan() {
			line := events.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &s); err != nil {
					t.Fatal(err)
				}
			case line == "" && name != "":
				return name, s
			}
		}
		t.Fatalf("the stream ended: %v", events.Err())
		return "", s
	}
	b.Served(0, "web-a")
	seq := 0
	for seq < 3 {
		name, s := next()
		if name != "snapshot" || s.Seq <= seq || s.Title != "stream" {
			t.Fatalf("event %q seq %d after %d", name, s.Seq, seq)
		}
		seq = s.Seq
	}
	cancel()
	<-ran
	for {
		name, s := next()
		if name == "end" {
			if !s.Done {
				t.Errorf("the end event's snapshot is not done")
			}
			break
		}
	}
	if rest, _ := io.ReadAll(resp.Body); len(rest) > 0 {
		t.Errorf("more after the end event: %q", rest)
	}
	// A page that comes after the end gets the last snapshot and the end.
	late, err := http.Get(srv.URL + StreamPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(late.Body)
	late.Body.Close()
	if !strings.Contains(string(body), "event: end") {
		t.Errorf("a late page got %q, want the end", body)
	}
}

// TestPage: the page's scripts run only with the nonce of its response,
// it may fetch from its own origin only, and it has a figure per chart.
func TestPage(t *testing.T) {
	b := New(Config{Title: "pinlab lab run: <scale-out>", Panels: []Panel{{Name: "clusterip", Duration: time.Minute}, {Name: "headless-rr", Duration: time.Minute}}})
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	m := regexp.MustCompile(`script-src 'nonce-([A-Za-z0-9_-]{20,})'`).FindStringSubmatch(csp)
	if m == nil {
		t.Fatalf("CSP %q: no script nonce", csp)
	}
	page := string(body)
	if want := `<script nonce="` + m[1] + `">`; !strings.Contains(page, want) {
		t.Errorf("the page lacks %q", want)
	}
	for _, secret := range []string{"scale-out", "clusterip", "headless-rr"} {
		if strings.Contains(page, secret) {
			t.Errorf("the page, served without the token, shows %q", secret)
		}
	}
	resp, err = http.Get(srv.URL + PanelsPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`id="live-0-rates"`, `id="live-1-history"`, `<h2 id="panel-1-h">headless-rr</h2>`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the panels lack %q", want)
		}
	}
	if !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("%d script elements, want 1 (with the nonce)", n)
	}
	for _, path := range []string{"/other", StreamPath + "/x"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", path, resp.Status)
		}
	}
}
