package stats

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// Window is a named measurement interval [From, To) as offsets from the start.
type Window struct {
	Name     string
	From, To time.Duration
}

// PodStats is one pod's share of a window. Counts are server-side: calls the
// pod finished for load clients (kubelet probes are not counted).
type PodStats struct {
	Name    string `json:"name"`
	IP      string `json:"ip"`
	Ordinal int    `json:"ordinal"` // 1-based, in order of creation
	// ReadyAt is the first time the pod turned Ready, in seconds from the
	// start (negative: before load started); nil if never.
	ReadyAt *float64 `json:"ready_at_s"`
	// Added is true when the pod first turned Ready after load started.
	Added bool `json:"added"`
	// FirstCall is the time of the pod's first served call in seconds; nil if none.
	FirstCall *float64         `json:"first_call_s"`
	Calls     int64            `json:"calls"`
	Rate      float64          `json:"calls_per_s"`
	Share     float64          `json:"share"`
	Idle      bool             `json:"idle"`
	Conns     float64          `json:"conns"` // time-averaged open client connections
	ByClient  map[string]int64 `json:"by_client"`
}

// WindowStats summarises one window.
type WindowStats struct {
	Name  string     `json:"name"`
	From  float64    `json:"from_s"`
	To    float64    `json:"to_s"`
	Pods  []PodStats `json:"pods"`
	Calls int64      `json:"calls"`
	Rate  float64    `json:"calls_per_s"`
	// Jain is Jain's fairness index over the pods' call counts.
	Jain    float64 `json:"jain"`
	MaxMean float64 `json:"max_over_mean"`
	Idle    int     `json:"idle_pods"`
	// AddedPods and AddedShare describe pods that turned Ready after load
	// started: how many were in the window and what share of calls they got.
	AddedPods  int     `json:"added_pods"`
	AddedShare float64 `json:"added_share"`
	// ConnsPerClient is the client-side time-averaged number of open
	// connections per client; ConnsOpened counts client connections opened in
	// the window.
	ConnsPerClient float64 `json:"conns_per_client"`
	ConnsOpened    int     `json:"conns_opened"`
	// ConnsOpenedPerSec is ConnsOpened over the window's length: the
	// reconnect rate (the cost of MaxConnectionAge).
	ConnsOpenedPerSec float64 `json:"conns_opened_per_s"`
	ClientOK          int64   `json:"client_ok"`
	// Failed counts failed calls; Errors splits them by status code and
	// ErrorCauses by cause (refused, goaway, deadline, ...).
	Failed      int64            `json:"failed"`
	Errors      map[string]int64 `json:"errors"`
	ErrorCauses map[string]int64 `json:"error_causes"`
	LatencyP50  float64          `json:"latency_p50_ms"`
	LatencyP90  float64          `json:"latency_p90_ms"`
	LatencyP99  float64          `json:"latency_p99_ms"`
	LatencyP999 float64          `json:"latency_p999_ms"`
	LatencyMax  float64          `json:"latency_max_ms"`
}

// ClientStats is one load client over the whole run.
type ClientStats struct {
	Name     string           `json:"name"`
	IP       string           `json:"ip"`
	OK       int64            `json:"ok"`
	Errors   map[string]int64 `json:"errors"`
	Causes   map[string]int64 `json:"error_causes"`
	ByPod    map[string]int64 `json:"by_pod"` // client-side, from replies
	Opened   int              `json:"conns_opened"`
	OpenedAt []float64        `json:"conns_opened_at_s"`
	Restarts []float64        `json:"restarts_s"`
}

// Summary is everything a run measured, summarised.
type Summary struct {
	Windows []WindowStats `json:"windows"`
	Clients []ClientStats `json:"clients"`
	// Timeline holds calls per second per pod (server-side), index = second.
	Timeline map[string][]int64 `json:"timeline"`
	// FailedTimeline holds failed calls per second (client-side, by due
	// time), index = second.
	FailedTimeline []int64 `json:"failed_timeline"`
	// ErrorWindows are the stretches of the run with failed calls.
	ErrorWindows []ErrorWindow `json:"error_windows"`
	// Rebalance has one entry per pod that turned Ready during the run.
	Rebalance []Rebalance `json:"rebalance"`
	Pods      []PodLife   `json:"pods"`
	DNS       []DNSQuery  `json:"dns_queries"`
	Proxy     []ProxyConn `json:"proxy_conns"`
	Marks     []Mark      `json:"marks"`
}

// PodLife is a pod's lifecycle: its phases as the API shows them and the
// kubelet's events (preStop, SIGTERM, hard stop, kill, restart).
type PodLife struct {
	Name   string        `json:"name"`
	IP     string        `json:"ip"`
	Phases []PhaseChange `json:"phases"`
	Events []Mark        `json:"events,omitempty"`
}

func secs(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// Summarize computes per-window statistics and the run's raw series; end is
// how long load ran (it bounds the rebalance search).
func (r *Recorder) Summarize(windows []Window, end time.Duration) Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s Summary
	for _, w := range windows {
		s.Windows = append(s.Windows, r.window(w))
	}
	for _, name := range sortedKeys(r.clients) {
		s.Clients = append(s.Clients, r.clientStats(r.clients[name]))
	}
	s.ErrorWindows = r.errorWindows()
	s.FailedTimeline = perSecond(r.failedBuckets())
	s.Rebalance = r.rebalances(end)
	s.Timeline = map[string][]int64{}
	for _, name := range r.podOrder {
		p := r.pods[name]
		pl := PodLife{Name: name, IP: p.ip}
		for _, ph := range p.phases {
			pl.Phases = append(pl.Phases, PhaseChange{Phase: ph.phase, At: Offset(r.offset(ph.at))})
		}
		for _, ev := range p.events {
			pl.Events = append(pl.Events, Mark{At: Offset(r.offset(ev.at)), Text: ev.text})
		}
		s.Pods = append(s.Pods, pl)
		s.Timeline[name] = perSecond(p.clientServed())
	}
	longest := 0
	for _, tl := range s.Timeline {
		longest = max(longest, len(tl))
	}
	for name, tl := range s.Timeline {
		s.Timeline[name] = append(tl, make([]int64, longest-len(tl))...)
	}
	for _, d := range r.dns {
		q := d.q
		q.At = Offset(r.offset(d.at))
		s.DNS = append(s.DNS, q)
	}
	for _, p := range r.proxy {
		c := p.c
		c.Opened = Offset(r.offset(p.opened))
		if !p.closed.IsZero() {
			closed := Offset(r.offset(p.closed))
			c.Closed = &closed
		}
		s.Proxy = append(s.Proxy, c)
	}
	for _, m := range r.marks {
		s.Marks = append(s.Marks, Mark{At: Offset(r.offset(m.at)), Text: m.text})
	}
	return s
}

// clientServed merges the served counts of every non-node peer.
func (p *podSeries) clientServed() counts {
	var all counts
	for label, c := range p.served {
		if label == "kubelet" {
			continue
		}
		if len(*c) > len(all) {
			all = append(all, make([]uint32, len(*c)-len(all))...)
		}
		for i, v := range *c {
			all[i] += v
		}
	}
	return all
}

func perSecond(c counts) []int64 {
	per := int(time.Second / Bucket)
	out := make([]int64, (len(c)+per-1)/per)
	for i, v := range c {
		out[i/per] += int64(v)
	}
	return out
}

// readyIntervals returns the intervals during which the pod was Ready.
func (p *podSeries) readyIntervals(start time.Time) [][2]time.Duration {
	var out [][2]time.Duration
	open := time.Duration(-1 << 62)
	ready := false
	for _, ph := range p.phases {
		at := ph.at.Sub(start)
		switch {
		case ph.phase == PodReady && !ready:
			ready, open = true, at
		case ph.phase != PodReady && ph.phase != PodCreated && ready:
			ready = false
			out = append(out, [2]time.Duration{open, at})
		}
	}
	if ready {
		out = append(out, [2]time.Duration{open, math.MaxInt64})
	}
	return out
}

func (p *podSeries) firstReady(start time.Time) (time.Duration, bool) {
	for _, ph := range p.phases {
		if ph.phase == PodReady {
			return ph.at.Sub(start), true
		}
	}
	return 0, false
}

func overlaps(ivs [][2]time.Duration, from, to time.Duration) bool {
	for _, iv := range ivs {
		if iv[0] < to && iv[1] > from {
			return true
		}
	}
	return false
}

func (r *Recorder) window(w Window) WindowStats {
	ws := WindowStats{Name: w.Name, From: secs(w.From), To: secs(w.To), Errors: map[string]int64{}, ErrorCauses: map[string]int64{}}
	b0, b1 := bucketOf(w.From), bucketOf(w.To)
	length := w.To - w.From
	for i, name := range r.podOrder {
		p := r.pods[name]
		served := p.clientServed()
		calls := served.sum(b0, b1)
		if calls == 0 && !overlaps(p.readyIntervals(r.start), w.From, w.To) {
			continue
		}
		ps := PodStats{Name: name, IP: p.ip, Ordinal: i + 1, Calls: calls, ByClient: map[string]int64{}}
		if at, ok := p.firstReady(r.start); ok {
			v := secs(at)
			ps.ReadyAt = &v
			ps.Added = at > 0
		}
		for b, v := range served {
			if v > 0 {
				f := secs(time.Duration(b) * Bucket)
				ps.FirstCall = &f
				break
			}
		}
		for label, c := range p.served {
			if n := c.sum(b0, b1); n > 0 && label != "kubelet" {
				ps.ByClient[label] = n
			}
		}
		ps.Rate = float64(calls) / length.Seconds()
		ps.Conns = avgOpen(p.conns, w.From, w.To, func(iv interval) bool { return iv.label != "kubelet" })
		ws.Pods = append(ws.Pods, ps)
		ws.Calls += calls
	}
	xs := make([]float64, len(ws.Pods))
	for i := range ws.Pods {
		p := &ws.Pods[i]
		xs[i] = float64(p.Calls)
		if ws.Calls > 0 {
			p.Share = float64(p.Calls) / float64(ws.Calls)
		}
		p.Idle = float64(p.Calls) < IdleFraction*float64(ws.Calls)/float64(len(ws.Pods))
		if p.Added {
			ws.AddedPods++
			ws.AddedShare += p.Share
		}
	}
	ws.Rate = float64(ws.Calls) / length.Seconds()
	ws.Jain, ws.MaxMean, ws.Idle = JainIndex(xs), MaxOverMean(xs), CountIdle(xs)
	if ws.Calls == 0 {
		ws.Jain = 0 // no calls: nothing was balanced, fairly or not
	}
	r.clientWindow(&ws, w)
	return ws
}

func (r *Recorder) clientWindow(ws *WindowStats, w Window) {
	b0, b1 := bucketOf(w.From), bucketOf(w.To)
	var conns float64
	for _, c := range r.clients {
		conns += avgOpen(c.conns, w.From, w.To, func(interval) bool { return true })
		for _, iv := range c.conns {
			if iv.from >= w.From && iv.from < w.To {
				ws.ConnsOpened++
			}
		}
		for code, k := range c.byCode {
			n := k.sum(b0, b1)
			if code == codes.OK {
				ws.ClientOK += n
			} else if n > 0 {
				ws.Errors[code.String()] += n
				ws.Failed += n
			}
		}
		for cause, k := range c.byCause {
			if n := k.sum(b0, b1); n > 0 {
				ws.ErrorCauses[cause] += n
			}
		}
	}
	if len(r.clients) > 0 {
		ws.ConnsPerClient = conns / float64(len(r.clients))
	}
	if w.To > w.From {
		ws.ConnsOpenedPerSec = float64(ws.ConnsOpened) / (w.To - w.From).Seconds()
	}
	var h Histogram
	for s := max(int(w.From/time.Second), 0); s < int((w.To+time.Second-1)/time.Second) && s < len(r.latency); s++ {
		h.Merge(&r.latency[s])
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	ws.LatencyP50, ws.LatencyP90 = ms(h.Quantile(0.5)), ms(h.Quantile(0.9))
	ws.LatencyP99, ws.LatencyP999, ws.LatencyMax = ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max())
}

// avgOpen returns the time-averaged number of intervals (accepted by keep)
// open during [from, to).
func avgOpen(ivs []interval, from, to time.Duration, keep func(interval) bool) float64 {
	if to <= from {
		return 0
	}
	var total time.Duration
	for _, iv := range ivs {
		if !keep(iv) {
			continue
		}
		end := iv.to
		if end < 0 {
			end = math.MaxInt64
		}
		lo, hi := max(iv.from, from), min(end, to)
		if hi > lo {
			total += hi - lo
		}
	}
	return float64(total) / float64(to-from)
}

func (r *Recorder) clientStats(c *clientSeries) ClientStats {
	cs := ClientStats{Name: c.name, Errors: map[string]int64{}, Causes: map[string]int64{}, ByPod: map[string]int64{}, Opened: len(c.conns)}
	for cause, k := range c.byCause {
		cs.Causes[cause] = k.sum(0, len(*k))
	}
	if c.ip.IsValid() {
		cs.IP = c.ip.String()
	}
	for code, k := range c.byCode {
		n := k.sum(0, len(*k))
		if code == codes.OK {
			cs.OK = n
		} else {
			cs.Errors[code.String()] = n
		}
	}
	for pod, k := range c.byPod {
		cs.ByPod[pod] = k.sum(0, len(*k))
	}
	for _, iv := range c.conns {
		cs.OpenedAt = append(cs.OpenedAt, secs(iv.from))
	}
	for _, at := range c.restarts {
		cs.Restarts = append(cs.Restarts, secs(at))
	}
	sort.Float64s(cs.Restarts)
	return cs
}

// CodeCounts formats counts by status code as "DeadlineExceeded 3, Unavailable 7".
func CodeCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
