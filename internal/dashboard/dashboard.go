// Package dashboard is pinlab's live view of a run (pinlab lab run --ui)
// or of a lab (pinlab lab up --ui). A Board gathers what happens: the
// calls each pod serves, the clients' connections, pod changes and
// timeline steps (it is a runner.Live), and the runner's progress. Its
// Handler serves a page that shows them as they change, over a stream of
// server-sent events: calls/s per pod now and over the last minutes,
// connections per client, recent events, the timeline's progress; for a
// lab also its objects, as pinlab lab get shows them, with buttons for the
// control API's verbs (scale, delete, not ready).
//
// The Handler is meant to be a control.Config.UI: the control API's server
// then checks every request as it checks its own (Host, Origin,
// Sec-Fetch-Site, and the token for everything but the page itself, which
// shows nothing of the run or the lab). The page takes the token from its
// URL's fragment (#token=...), which browsers never send to the server,
// keeps it in the tab's session storage, and sends it as "Authorization:
// Bearer" with every request it makes: its panels, the event stream (read
// with fetch, since EventSource cannot send headers) and the control
// verbs, which go to the control API itself, same origin.
package dashboard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/outcome"
)

// Defaults used when the matching Config field is zero.
const (
	// DefaultTick is how often the page is updated.
	DefaultTick = 500 * time.Millisecond
	// DefaultHistory is how far back the calls/s chart reaches.
	DefaultHistory = 2 * time.Minute
)

// Limits of what a snapshot carries, so that a page stays light with a
// thousand pods.
const (
	// MaxHistoryPods is the most pods the calls/s-over-time chart draws
	// (the first, by creation).
	MaxHistoryPods = 50
	// MaxEvents is how many recent events the page lists.
	MaxEvents = 60
)

// Config configures a Board. The zero value is a board with no panel.
type Config struct {
	// Title heads the page, e.g. "pinlab lab run: scale-out".
	Title string
	// Panels are the page's panels: one per variant of a run (index-aligned
	// with the plan's variants, as runner.Live numbers them), or one for a
	// lab.
	Panels []Panel
	// Objects, if not nil, lists the lab's objects as tables (lab up); the
	// page then shows them with buttons for the control API's verbs. It is
	// called once per tick from the board's goroutine.
	Objects func() []Table
	// Tick is how often the page is updated; zero means DefaultTick.
	Tick time.Duration
	// History is how far back the calls/s chart reaches; zero means
	// DefaultHistory.
	History time.Duration
}

// Panel describes one variant of a run, or a lab.
type Panel struct {
	Name, Description string
	// Duration is how long load runs; zero for a lab, which runs until
	// stopped.
	Duration time.Duration
	// Steps are the timeline's steps; Windows the measurement windows.
	Steps   []Step
	Windows []Window
}

// Step is a timeline step: when and what ("scale Deployment pricing to 10").
type Step struct {
	At   time.Duration
	Text string
}

// Window is a measurement window [From, To).
type Window struct {
	Name     string
	From, To time.Duration
}

// Table is a list of objects as pinlab lab get prints them: Kind is
// Service, Pod, EndpointSlice, Deployment or StatefulSet; Header the
// columns; Rows start with namespace and name.
type Table struct {
	Kind   string     `json:"kind"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// now is the board's clock; a test seam.
var now = time.Now

// Board gathers a run's or a lab's live figures. Its methods are safe for
// concurrent use; Served and Conn are called on every call and connection
// and only count.
type Board struct {
	cfg Config

	mu       sync.Mutex
	created  time.Time
	panels   []*panelState
	events   []event // the last MaxEvents, oldest first
	final    []string
	seq      int
	last     []byte // the last snapshot, as sent
	subs     map[chan []byte]bool
	finished bool
}

// New returns a board for cfg; call Run to make it publish.
func New(cfg Config) *Board {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	b := &Board{cfg: cfg, created: now(), subs: map[chan []byte]bool{}}
	for _, p := range cfg.Panels {
		b.panels = append(b.panels, newPanelState(p))
	}
	return b
}

// Served counts a call pod served in panel variant.
func (b *Board) Served(variant int, pod string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.panel(variant); p != nil {
		p.pod(pod).calls++
	}
}

// Conn counts a client's connection opening or closing in panel variant.
func (b *Board) Conn(variant int, client string, open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.panel(variant)
	if p == nil {
		return
	}
	c := p.client(client)
	if open {
		c.open++
		c.opened++
	} else if c.open > 0 {
		c.open--
	}
}

// Event records a pod change or a timeline step in panel variant.
func (b *Board) Event(variant int, e outcome.LiveEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.panel(variant)
	if p == nil {
		return
	}
	if e.At.IsZero() {
		e.At = now()
	}
	text := p.apply(e)
	b.events = append(b.events, event{Panel: p.cfg.Name, at: e.At, Text: text})
	if n := len(b.events); n > MaxEvents {
		b.events = append(b.events[:0:0], b.events[n-MaxEvents:]...)
	}
}

// Progress records the runner's progress of each variant (a
// runner.Options.Progress).
func (b *Board) Progress(ps []outcome.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, pr := range ps {
		if p := b.panel(i); p != nil {
			p.progress(pr)
		}
	}
}

// Finish gives the lines the page shows once the run is over (the
// verdict); the next snapshot carries them.
func (b *Board) Finish(lines []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.final = append([]string(nil), lines...)
}

func (b *Board) panel(i int) *panelState {
	if i < 0 || i >= len(b.panels) {
		return nil
	}
	return b.panels[i]
}

// Run publishes a snapshot every tick until ctx ends; then it publishes a
// last one, marked done, and ends every stream (their handlers return).
func (b *Board) Run(ctx context.Context) {
	t := time.NewTicker(b.cfg.Tick)
	defer t.Stop()
	b.publish(false)
	for {
		select {
		case <-ctx.Done():
			b.publish(true)
			return
		case <-t.C:
			b.publish(false)
		}
	}
}

// publish takes a snapshot and offers it to every stream; with done, it
// ends them.
func (b *Board) publish(done bool) {
	var tables []Table
	if b.cfg.Objects != nil && !done {
		tables = b.cfg.Objects()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.seq++
	data, err := b.snapshot(done, tables)
	if err != nil {
		data = []byte(fmt.Sprintf(`{"error": %q}`, err.Error()))
	}
	b.last = data
	for ch := range b.subs {
		offer(ch, data)
		if done {
			close(ch)
			delete(b.subs, ch)
		}
	}
	b.finished = done
}

// offer puts data in ch, replacing a snapshot the stream has not sent yet:
// a slow page skips snapshots rather than falling behind.
func offer(ch chan []byte, data []byte) {
	select {
	case <-ch:
	default:
	}
	ch <- data
}

// subscribe returns a stream's channel, holding the latest snapshot; it is
// closed once the board is done (at once if it already is).
func (b *Board) subscribe() chan []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan []byte, 1)
	if b.last != nil {
		ch <- b.last
	}
	if b.finished {
		close(ch)
		return ch
	}
	b.subs[ch] = true
	return ch
}

// unsubscribe forgets a stream whose page went away.
func (b *Board) unsubscribe(ch chan []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, ch)
}

// event is one line of the recent events.
type event struct {
	Panel string  `json:"panel"`
	At    float64 `json:"at_s"` // seconds from the panel's start
	// Time is when it happened, Unix milliseconds: the page shows it as
	// the time of day and measures how late it showed the event.
	Time int64  `json:"time_ms"`
	Text string `json:"text"`
	at   time.Time
}

// eventText describes a live event for the list.
func eventText(e outcome.LiveEvent) string {
	switch {
	case e.Pod != "" && e.Phase != "":
		ip := ""
		if e.IP != "" {
			ip = " (" + e.IP + ")"
		}
		return fmt.Sprintf("pod %s%s %s", e.Pod, ip, e.Phase)
	case e.Pod != "":
		return fmt.Sprintf("pod %s: %s", e.Pod, e.Text)
	case e.Err != "":
		return fmt.Sprintf("step %s failed: %s", e.Text, e.Err)
	}
	return "step " + e.Text
}
