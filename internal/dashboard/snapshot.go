package dashboard

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/pinlab/pinlab/internal/chart"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/stats"
)

// panelState is one panel's figures.
type panelState struct {
	cfg      Panel
	state    string
	start    time.Time // when load started (a lab: when the board was made)
	elapsed  time.Duration
	calls    int64
	failed   int64
	stepsRun int

	pods    []*podState // in order of first sight
	byName  map[string]*podState
	clients []*clientState
	byCli   map[string]*clientState

	samples []sample // calls per pod at past ticks, for rates
	history []sample // one a second, for the chart
}

type podState struct {
	name, ip string
	phase    stats.PodPhase
	calls    int64
	rate     float64
}

type clientState struct {
	name         string
	open, opened int
}

// sample is every pod's calls at a time.
type sample struct {
	at    time.Time
	calls []int64   // index-aligned with panelState.pods
	rates []float64 // history only: calls/s over the second before at
}

func newPanelState(p Panel) *panelState {
	state := "waiting"
	if p.Duration == 0 {
		state = "up"
	}
	return &panelState{cfg: p, state: state, start: now(), byName: map[string]*podState{}, byCli: map[string]*clientState{}}
}

func (p *panelState) pod(name string) *podState {
	ps := p.byName[name]
	if ps == nil {
		ps = &podState{name: name, phase: stats.PodCreated}
		p.byName[name] = ps
		p.pods = append(p.pods, ps)
	}
	return ps
}

func (p *panelState) client(name string) *clientState {
	c := p.byCli[name]
	if c == nil {
		c = &clientState{name: name}
		p.byCli[name] = c
		p.clients = append(p.clients, c)
	}
	return c
}

// apply records a live event and returns its text for the list.
func (p *panelState) apply(e outcome.LiveEvent) string {
	if e.Pod != "" {
		ps := p.pod(e.Pod)
		if e.IP != "" {
			ps.ip = e.IP
		}
		if e.Phase != "" && (ps.phase != stats.PodTerminating || e.Phase == stats.PodDeleted) {
			ps.phase = e.Phase
		}
	} else {
		p.stepsRun++
	}
	return eventText(e)
}

// progress records the runner's progress; the first report of running load
// fixes the panel's start.
func (p *panelState) progress(pr outcome.Progress) {
	if p.state == "waiting" || p.state == "starting" {
		if pr.State == "running" {
			p.start = now().Add(-pr.Elapsed)
		}
	}
	p.state, p.elapsed, p.calls, p.failed = pr.State, pr.Elapsed, pr.Calls, pr.Failed
}

// tick samples the pods' calls and updates their rates (calls over the
// last second or so) and, once a second, the history.
func (p *panelState) tick(t time.Time, keep time.Duration) {
	cur := sample{at: t, calls: make([]int64, len(p.pods))}
	for i, ps := range p.pods {
		cur.calls[i] = ps.calls
	}
	p.samples = append(p.samples, cur)
	// The oldest sample at least a second old is the base.
	base := 0
	for i, s := range p.samples {
		if t.Sub(s.at) >= time.Second {
			base = i
		}
	}
	p.samples = p.samples[base:]
	old := p.samples[0]
	dt := t.Sub(old.at).Seconds()
	for i, ps := range p.pods {
		ps.rate = 0
		if dt > 0 {
			var before int64
			if i < len(old.calls) {
				before = old.calls[i]
			}
			ps.rate = math.Round(float64(ps.calls-before)/dt*10) / 10
		}
	}
	if n := len(p.history); n == 0 || t.Sub(p.history[n-1].at) >= time.Second {
		h := sample{at: t, rates: make([]float64, len(p.pods))}
		for i, ps := range p.pods {
			h.rates[i] = ps.rate
		}
		p.history = append(p.history, h)
		for len(p.history) > 1 && t.Sub(p.history[0].at) > keep {
			p.history = p.history[1:]
		}
	}
}

// panelSnap is what the page gets of a panel.
type panelSnap struct {
	Name        string       `json:"name"`
	Description string       `json:"description,omitempty"`
	State       string       `json:"state"`
	Elapsed     float64      `json:"elapsed_s"`
	Duration    float64      `json:"duration_s"`
	Calls       int64        `json:"calls"`
	Failed      int64        `json:"failed"`
	Steps       []stepSnap   `json:"steps"`
	Windows     []windowSnap `json:"windows"`
	Pods        []podSnap    `json:"pods"`
	Clients     []clientSnap `json:"clients"`
	Rates       chart.Chart  `json:"rates"`
	History     chart.Chart  `json:"history"`
}

type stepSnap struct {
	At   float64 `json:"at_s"`
	Text string  `json:"text"`
	Done bool    `json:"done"`
}

type windowSnap struct {
	Name string  `json:"name"`
	From float64 `json:"from_s"`
	To   float64 `json:"to_s"`
}

type podSnap struct {
	Label string  `json:"label"`
	Name  string  `json:"name"`
	IP    string  `json:"ip"`
	Phase string  `json:"phase"`
	Calls int64   `json:"calls"`
	Rate  float64 `json:"rate"`
}

type clientSnap struct {
	Name   string `json:"name"`
	Open   int    `json:"open"`
	Opened int    `json:"opened"`
}

// snapshot is what the page gets at each tick.
type snapshot struct {
	Title   string      `json:"title"`
	Seq     int         `json:"seq"`
	Done    bool        `json:"done"`
	Final   []string    `json:"final,omitempty"`
	Panels  []panelSnap `json:"panels"`
	Events  []event     `json:"events"`
	Lab     bool        `json:"lab"`
	Objects []Table     `json:"objects,omitempty"`
}

// snapshot ticks every panel and encodes what the page shows. Callers hold
// b.mu.
func (b *Board) snapshot(done bool, tables []Table) ([]byte, error) {
	t := now()
	s := snapshot{Title: b.cfg.Title, Seq: b.seq, Done: done, Final: b.final, Lab: b.cfg.Objects != nil, Objects: tables, Events: []event{}}
	for i, p := range b.panels {
		p.tick(t, b.cfg.History)
		s.Panels = append(s.Panels, p.snap(i, t))
	}
	for _, e := range b.events {
		start := b.created
		for _, p := range b.panels {
			if p.cfg.Name == e.Panel {
				start = p.start
			}
		}
		e.At = math.Round(e.at.Sub(start).Seconds()*1000) / 1000
		e.Time = e.at.UnixMilli()
		s.Events = append(s.Events, e)
	}
	return json.Marshal(s)
}

func (p *panelState) snap(i int, t time.Time) panelSnap {
	elapsed := p.elapsed
	if p.cfg.Duration == 0 {
		elapsed = t.Sub(p.start)
	}
	s := panelSnap{Name: p.cfg.Name, Description: p.cfg.Description, State: p.state, Elapsed: secs(elapsed), Duration: secs(p.cfg.Duration),
		Calls: p.calls, Failed: p.failed, Steps: []stepSnap{}, Windows: []windowSnap{}, Pods: []podSnap{}, Clients: []clientSnap{}}
	if p.cfg.Duration == 0 {
		for _, ps := range p.pods {
			s.Calls += ps.calls
		}
	}
	for k, st := range p.cfg.Steps {
		s.Steps = append(s.Steps, stepSnap{At: secs(st.At), Text: st.Text, Done: k < p.stepsRun})
	}
	for _, w := range p.cfg.Windows {
		s.Windows = append(s.Windows, windowSnap{Name: w.Name, From: secs(w.From), To: secs(w.To)})
	}
	for k, ps := range p.pods {
		s.Pods = append(s.Pods, podSnap{Label: label(k), Name: ps.name, IP: ps.ip, Phase: string(ps.phase), Calls: ps.calls, Rate: ps.rate})
	}
	for _, c := range p.clients {
		s.Clients = append(s.Clients, clientSnap{Name: c.name, Open: c.open, Opened: c.opened})
	}
	s.Rates, s.History = p.ratesChart(i), p.historyChart(i, t)
	return s
}

func secs(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

func label(k int) string { return fmt.Sprintf("p%d", k+1) }

// RatesID and HistoryID are the IDs of a panel's charts in the page.
func RatesID(panel int) string   { return fmt.Sprintf("live-%d-rates", panel) }
func HistoryID(panel int) string { return fmt.Sprintf("live-%d-history", panel) }

// ratesChart is calls/s per pod now: the per-window bars, live.
func (p *panelState) ratesChart(i int) chart.Chart {
	c := chart.Chart{ID: RatesID(i), Kind: chart.Bars, Title: "Calls/s per pod, over the last second", XLabel: "pod", YLabel: "calls/s", Unit: "calls/s",
		X: chart.Values{}, Series: []chart.Series{{Label: "rate", Values: chart.Values{}}}}
	for k, ps := range p.pods {
		c.X = append(c.X, float64(k))
		c.Categories = append(c.Categories, label(k))
		c.Series[0].Values = append(c.Series[0].Values, ps.rate)
		ip := ps.ip
		if ip == "" {
			ip = "no IP yet"
		}
		c.Notes = append(c.Notes, fmt.Sprintf("%s %s, %s; %d calls so far", ps.name, ip, ps.phase, ps.calls))
	}
	return c
}

// historyChart is calls/s per pod, a point a second, over the last
// minutes; pods after the first MaxHistoryPods are left out.
func (p *panelState) historyChart(i int, t time.Time) chart.Chart {
	c := chart.Chart{ID: HistoryID(i), Kind: chart.Line, Title: "Calls/s per pod, over time", XLabel: "time (s)", YLabel: "calls/s", Unit: "calls/s",
		X: chart.Values{}, Series: []chart.Series{}}
	for _, h := range p.history {
		c.X = append(c.X, secs(h.at.Sub(p.start)))
	}
	for k, ps := range p.pods {
		if k == MaxHistoryPods {
			c.Title += fmt.Sprintf(" (the first %d pods of %d)", MaxHistoryPods, len(p.pods))
			break
		}
		vals := make(chart.Values, len(p.history))
		for j, h := range p.history {
			vals[j] = math.NaN()
			if k < len(h.rates) {
				vals[j] = h.rates[k]
			}
		}
		c.Series = append(c.Series, chart.Series{Label: label(k), Name: label(k) + " " + ps.name, Values: vals})
	}
	if n := len(c.X); n > 0 {
		c.XMax = c.X[n-1] + 1
	}
	for _, st := range p.cfg.Steps {
		c.Marks = append(c.Marks, chart.Mark{At: secs(st.At), Text: st.Text})
	}
	for _, w := range p.cfg.Windows {
		c.Bands = append(c.Bands, chart.Band{From: secs(w.From), To: secs(w.To), Kind: chart.Window, Text: "window " + w.Name})
	}
	return c
}
