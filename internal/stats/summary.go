package stats

import (
	"cmp"
	"fmt"
	"math"
	"slices"
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
	// State is the pod's state at the window's end: PodReady, PodNotReady,
	// PodTerminating, PodDeleted or PodCreated (not Ready yet).
	State PodPhase `json:"state"`
	// Changes are the pod's lifecycle changes inside the window, in order:
	// Ready turning true or false, terminating, deleted, and, from the
	// kubelet, its container killed, restarted, hung or resumed.
	Changes []PhaseChange `json:"changes,omitempty"`
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
	Name string     `json:"name"`
	From float64    `json:"from_s"`
	To   float64    `json:"to_s"`
	Pods []PodStats `json:"pods"`
	// OtherPods are pods that existed during the window but were never
	// Ready in it and served no call (pending, not ready, restarting,
	// terminating): shown with their state, not counted in shares and
	// fairness.
	OtherPods []PodStats `json:"other_pods,omitempty"`
	Calls     int64      `json:"calls"`
	Rate      float64    `json:"calls_per_s"`
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
	// LagP50, LagP99 and LagMax are the schedule lag: how late the load
	// generator launched calls against their due times, in ms. High lag
	// means the machine could not keep the schedule.
	LagP50 float64 `json:"schedule_lag_p50_ms"`
	LagP99 float64 `json:"schedule_lag_p99_ms"`
	LagMax float64 `json:"schedule_lag_max_ms"`
	// MachineCPU is the busy share of all the machine's CPUs and
	// ProcessCPU the lab process's share, both averaged over the window's
	// seconds (0-1; negative when not measured).
	MachineCPU  float64 `json:"machine_cpu"`
	ProcessCPU  float64 `json:"process_cpu"`
	LatencyP50  float64 `json:"latency_p50_ms"`
	LatencyP90  float64 `json:"latency_p90_ms"`
	LatencyP99  float64 `json:"latency_p99_ms"`
	LatencyP999 float64 `json:"latency_p999_ms"`
	LatencyMax  float64 `json:"latency_max_ms"`
}

// ClientStats is one load client over the whole run.
type ClientStats struct {
	Name     string           `json:"name"`
	Group    string           `json:"group,omitempty"`
	Service  string           `json:"service,omitempty"` // the target Service, namespace/name
	IP       string           `json:"ip"`
	OK       int64            `json:"ok"`
	Errors   map[string]int64 `json:"errors"`
	Causes   map[string]int64 `json:"error_causes"`
	ByPod    map[string]int64 `json:"by_pod"` // client-side, from replies
	Opened   int              `json:"conns_opened"`
	OpenedAt []float64        `json:"conns_opened_at_s"`
	// Conns are the client's connections in the order they opened.
	Conns    []Conn    `json:"conns"`
	Restarts []float64 `json:"restarts_s"`
}

// Conn is one client connection: when it opened and closed (nil while still
// open when load stopped), where to, when a GOAWAY arrived on it (nil:
// none), and what closed it as the client saw it ("goaway max_age",
// "goaway graceful_stop", "eof", "reset", "client", ...; empty when not
// observed).
type Conn struct {
	Remote string  `json:"remote"`
	Opened Offset  `json:"opened_s"`
	GoAway *Offset `json:"goaway_s,omitempty"`
	Closed *Offset `json:"closed_s"`
	Reason string  `json:"close_reason,omitempty"`
}

// Summary is everything a run measured, summarised.
type Summary struct {
	// End is how long load ran: the duration, or less when interrupted.
	End     Offset        `json:"end_s"`
	Windows []WindowStats `json:"windows"`
	// Groups has the windows of each client group alone (its target
	// Service's pods, its clients' calls and connections) when more than
	// one group ran; Services those of each target Service when the
	// groups targeted more than one.
	Groups   []GroupStats   `json:"groups,omitempty"`
	Services []ServiceStats `json:"services,omitempty"`
	Clients  []ClientStats  `json:"clients"`
	// Timeline holds calls per second per pod (server-side), index = second.
	Timeline map[string][]int64 `json:"timeline"`
	// FailedTimeline holds failed calls per second (client-side, by due
	// time), index = second.
	FailedTimeline []int64 `json:"failed_timeline"`
	// ErrorWindows are the stretches of the run with failed calls.
	ErrorWindows []ErrorWindow `json:"error_windows"`
	// Rebalance has one entry per pod that turned Ready during the run.
	Rebalance []Rebalance  `json:"rebalance"`
	Pods      []PodLife    `json:"pods"`
	DNS       []DNSQuery   `json:"dns_queries"`
	Proxy     []ProxyConn  `json:"proxy_conns"`
	Marks     []Mark       `json:"marks"`
	Steps     []StepRecord `json:"steps,omitempty"`
	// Lag holds the schedule lag per second of the run (index = second),
	// every group together.
	Lag []LagSecond `json:"schedule_lag"`
	// CPU holds the machine's and the process's CPU use per second.
	CPU []CPUSecond `json:"cpu,omitempty"`
}

// LagSecond is the schedule lag of one second's calls, in ms.
type LagSecond struct {
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// CPUSecond is the CPU use over the second before At (shares 0-1 of all
// CPUs; Machine negative when unknown). Machine counts Steal as busy.
type CPUSecond struct {
	At      Offset  `json:"at_s"`
	Machine float64 `json:"machine"`
	Process float64 `json:"process"`
	// Steal is the time a virtual machine's hypervisor ran other guests
	// while this machine's CPUs had work ("steal" in /proc/stat); 0 when
	// none or not measured.
	Steal float64 `json:"steal,omitempty"`
}

// GroupStats are the windows of one client group: the pods of the Service
// it targets, counting only its own clients' calls, connections and errors.
type GroupStats struct {
	Name    string        `json:"name"`
	Service string        `json:"service"`
	Windows []WindowStats `json:"windows"`
}

// ServiceStats are the windows of one target Service: its pods and the
// clients of the groups that target it.
type ServiceStats struct {
	Name    string        `json:"name"` // namespace/name
	Groups  []string      `json:"groups"`
	Windows []WindowStats `json:"windows"`
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
	s := Summary{End: Offset(end)}
	for _, w := range windows {
		s.Windows = append(s.Windows, r.window(w, selection{}))
	}
	s.Groups, s.Services = r.groupStats(windows), r.serviceStats(windows)
	for _, name := range sortedKeys(r.clients) {
		s.Clients = append(s.Clients, r.clientStats(r.clients[name]))
	}
	s.ErrorWindows = r.errorWindows()
	s.FailedTimeline = perSecond(r.failedBuckets())
	s.Rebalance = r.rebalances(end)
	s.Timeline, s.Pods = r.podSeries()
	for _, d := range r.dns {
		q := d.q
		q.At = r.at(d.at)
		s.DNS = append(s.DNS, q)
	}
	for _, p := range r.proxy {
		c := p.c
		c.Opened, c.Closed = r.at(p.opened), r.atOrNil(p.closed)
		s.Proxy = append(s.Proxy, c)
	}
	for _, m := range r.marks {
		s.Marks = append(s.Marks, Mark{At: r.at(m.at), Text: m.text})
	}
	for _, st := range r.steps {
		rec := st.s
		rec.At = r.at(st.at)
		s.Steps = append(s.Steps, rec)
	}
	s.Lag = r.lagTimeline()
	for _, c := range r.cpu {
		s.CPU = append(s.CPU, CPUSecond{At: r.at(c.at), Machine: c.machine, Process: c.process, Steal: c.steal})
	}
	return s
}

// lagTimeline merges every group's lag per second.
func (r *Recorder) lagTimeline() []LagSecond {
	var out []LagSecond
	for s := 0; ; s++ {
		var h Histogram
		any := false
		for _, hs := range r.lag {
			if s < len(hs) {
				any = true
				h.Merge(&hs[s])
			}
		}
		if !any {
			return out
		}
		out = append(out, LagSecond{P99: ms(h.Quantile(0.99)), Max: ms(h.Max())})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuIn averages the CPU samples taken within [from, to).
func (r *Recorder) cpuIn(w Window) (machine, process float64) {
	n, nm := 0, 0
	for _, c := range r.cpu {
		if d := c.at.Sub(r.start); d > w.From && d <= w.To {
			n++
			process += c.process
			if c.machine >= 0 {
				nm++
				machine += c.machine
			}
		}
	}
	if n == 0 {
		return -1, -1
	}
	process /= float64(n)
	if nm == 0 {
		return -1, process
	}
	return machine / float64(nm), process
}

// at is t as an offset from the start.
func (r *Recorder) at(t time.Time) Offset { return Offset(r.offset(t)) }

// atOrNil is t as an offset, or nil for the zero time (not happened).
func (r *Recorder) atOrNil(t time.Time) *Offset {
	if t.IsZero() {
		return nil
	}
	o := r.at(t)
	return &o
}

// podSeries returns the per-second timeline of every pod (all of the same
// length) and the pods' lifecycles.
func (r *Recorder) podSeries() (map[string][]int64, []PodLife) {
	timeline := map[string][]int64{}
	var lives []PodLife
	longest := 0
	for _, name := range r.podOrder {
		p := r.pods[name]
		pl := PodLife{Name: name, IP: p.ip}
		for _, ph := range p.phases {
			pl.Phases = append(pl.Phases, PhaseChange{Phase: ph.phase, At: r.at(ph.at)})
		}
		for _, ev := range p.events {
			pl.Events = append(pl.Events, Mark{At: r.at(ev.at), Text: ev.text})
		}
		lives = append(lives, pl)
		timeline[name] = perSecond(p.clientServed(nil))
		longest = max(longest, len(timeline[name]))
	}
	for name, tl := range timeline {
		timeline[name] = append(tl, make([]int64, longest-len(tl))...)
	}
	return timeline, lives
}

// selection narrows a window to some pods and clients: a zero selection is
// every pod and every client.
type selection struct {
	service string // pods that back this Service ("" all)
	group   string // calls, connections and errors of this group's clients ("" all)
}

func (s selection) pod(p *podSeries) bool {
	return s.service == "" || slices.Contains(p.services, s.service)
}

func (s selection) client(c *clientSeries) bool { return s.group == "" || c.Group == s.group }

// groupStats returns per-group windows when more than one group ran.
func (r *Recorder) groupStats(windows []Window) []GroupStats {
	var out []GroupStats
	for _, c := range r.clients {
		if c.Group != "" && !slices.ContainsFunc(out, func(g GroupStats) bool { return g.Name == c.Group }) {
			out = append(out, GroupStats{Name: c.Group, Service: c.Service})
		}
	}
	if len(out) < 2 {
		return nil
	}
	slices.SortFunc(out, func(a, b GroupStats) int { return strings.Compare(a.Name, b.Name) })
	for i := range out {
		for _, w := range windows {
			out[i].Windows = append(out[i].Windows, r.window(w, selection{service: out[i].Service, group: out[i].Name}))
		}
	}
	return out
}

// serviceStats returns per-Service windows when clients targeted more than
// one Service.
func (r *Recorder) serviceStats(windows []Window) []ServiceStats {
	groups := map[string][]string{}
	for _, c := range r.clients {
		if c.Service != "" && !slices.Contains(groups[c.Service], c.Group) {
			groups[c.Service] = append(groups[c.Service], c.Group)
		}
	}
	if len(groups) < 2 {
		return nil
	}
	var out []ServiceStats
	for _, svc := range sortedKeys(groups) {
		ss := ServiceStats{Name: svc, Groups: groups[svc]}
		slices.Sort(ss.Groups)
		for _, w := range windows {
			ss.Windows = append(ss.Windows, r.window(w, selection{service: svc}))
		}
		out = append(out, ss)
	}
	return out
}

// clientServed merges the served counts of every non-node peer for which
// keep is true (nil keeps all).
func (p *podSeries) clientServed(keep func(label string) bool) counts {
	var all counts
	for label, c := range p.served {
		if label == "kubelet" || keep != nil && !keep(label) {
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

// window summarises window w over the pods and clients sel selects.
func (r *Recorder) window(w Window, sel selection) WindowStats {
	ws := WindowStats{Name: w.Name, From: secs(w.From), To: secs(w.To), Errors: map[string]int64{}, ErrorCauses: map[string]int64{}}
	b0, b1 := bucketOf(w.From), bucketOf(w.To)
	length := w.To - w.From
	fromGroup := func(label string) bool { return sel.group == "" || r.groups[label] == sel.group }
	for i, name := range r.podOrder {
		p := r.pods[name]
		if !sel.pod(p) {
			continue
		}
		served := p.clientServed(fromGroup)
		calls := served.sum(b0, b1)
		if calls == 0 && !overlaps(p.readyIntervals(r.start), w.From, w.To) {
			if r.alive(p, w) {
				o := PodStats{Name: name, IP: p.ip, Ordinal: i + 1, ByClient: map[string]int64{}}
				o.State, o.Changes = r.podState(p, w)
				ws.OtherPods = append(ws.OtherPods, o)
			}
			continue
		}
		ps := PodStats{Name: name, IP: p.ip, Ordinal: i + 1, Calls: calls, ByClient: map[string]int64{}}
		if at, ok := p.firstReady(r.start); ok {
			v := secs(at)
			ps.ReadyAt = &v
			ps.Added = at > 0
		}
		ps.State, ps.Changes = r.podState(p, w)
		for b, v := range served {
			if v > 0 {
				f := secs(time.Duration(b) * Bucket)
				ps.FirstCall = &f
				break
			}
		}
		for label, c := range p.served {
			if n := c.sum(b0, b1); n > 0 && label != "kubelet" && fromGroup(label) {
				ps.ByClient[label] = n
			}
		}
		ps.Rate = float64(calls) / length.Seconds()
		ps.Conns = r.avgOpen(p.conns, w, func(iv interval) bool { return iv.label != "kubelet" && fromGroup(iv.label) })
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
	r.clientWindow(&ws, w, sel)
	return ws
}

// alive reports whether p existed during window w: created before its end
// and not deleted before its start.
func (r *Recorder) alive(p *podSeries, w Window) bool {
	created, deleted := false, false
	for _, ph := range p.phases {
		d := ph.at.Sub(r.start)
		switch ph.phase {
		case PodDeleted:
			deleted = deleted || d < w.From
		default:
			created = created || d < w.To
		}
	}
	return created && !deleted
}

// podState returns p's state at the end of window w and its lifecycle
// changes inside it (phases from the API, restarts from the kubelet).
func (r *Recorder) podState(p *podSeries, w Window) (PodPhase, []PhaseChange) {
	state := PodPhase("")
	var changes []PhaseChange
	inside := func(at time.Time) bool { d := at.Sub(r.start); return d >= w.From && d < w.To }
	for _, ph := range p.phases {
		d := ph.at.Sub(r.start)
		if d >= w.To {
			break
		}
		switch {
		case state == PodTerminating && ph.phase != PodDeleted:
			// Ready changes of a terminating pod do not undo termination.
		case ph.phase != PodCreated || state == "":
			state = ph.phase
		}
		if inside(ph.at) && ph.phase != PodCreated {
			changes = append(changes, PhaseChange{Phase: ph.phase, At: r.at(ph.at)})
		}
	}
	for _, ev := range p.events {
		if ph, ok := kubeletChanges[ev.text]; ok && inside(ev.at) {
			changes = append(changes, PhaseChange{Phase: ph, At: r.at(ev.at)})
		}
	}
	slices.SortStableFunc(changes, func(a, b PhaseChange) int { return cmp.Compare(a.At, b.At) })
	return state, changes
}

func (r *Recorder) clientWindow(ws *WindowStats, w Window, sel selection) {
	b0, b1 := bucketOf(w.From), bucketOf(w.To)
	var conns float64
	clients := 0
	var h Histogram
	for _, c := range r.clients {
		if !sel.client(c) {
			continue
		}
		clients++
		conns += r.avgOpen(c.conns, w, func(interval) bool { return true })
		for _, iv := range c.conns {
			if d := iv.from.Sub(r.start); d >= w.From && d < w.To {
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
	for group, hs := range r.latency {
		if sel.group != "" && group != sel.group {
			continue
		}
		for s := max(int(w.From/time.Second), 0); s < int((w.To+time.Second-1)/time.Second) && s < len(hs); s++ {
			h.Merge(&hs[s])
		}
	}
	if clients > 0 {
		ws.ConnsPerClient = conns / float64(clients)
	}
	if w.To > w.From {
		ws.ConnsOpenedPerSec = float64(ws.ConnsOpened) / (w.To - w.From).Seconds()
	}
	var lag Histogram
	for group, hs := range r.lag {
		if sel.group != "" && group != sel.group {
			continue
		}
		for s := max(int(w.From/time.Second), 0); s < int((w.To+time.Second-1)/time.Second) && s < len(hs); s++ {
			lag.Merge(&hs[s])
		}
	}
	ws.LagP50, ws.LagP99, ws.LagMax = ms(lag.Quantile(0.5)), ms(lag.Quantile(0.99)), ms(lag.Max())
	ws.MachineCPU, ws.ProcessCPU = r.cpuIn(w)
	ws.LatencyP50, ws.LatencyP90 = ms(h.Quantile(0.5)), ms(h.Quantile(0.9))
	ws.LatencyP99, ws.LatencyP999, ws.LatencyMax = ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max())
}

// avgOpen returns the time-averaged number of intervals (accepted by keep)
// open during window w.
func (r *Recorder) avgOpen(ivs []interval, w Window, keep func(interval) bool) float64 {
	if w.To <= w.From {
		return 0
	}
	var total time.Duration
	for _, iv := range ivs {
		if !keep(iv) {
			continue
		}
		end := time.Duration(math.MaxInt64)
		if !iv.to.IsZero() {
			end = iv.to.Sub(r.start)
		}
		lo, hi := max(iv.from.Sub(r.start), w.From), min(end, w.To)
		if hi > lo {
			total += hi - lo
		}
	}
	return float64(total) / float64(w.To-w.From)
}

func (r *Recorder) clientStats(c *clientSeries) ClientStats {
	cs := ClientStats{Name: c.Name, Group: c.Group, Service: c.Service, Errors: map[string]int64{}, Causes: map[string]int64{}, ByPod: map[string]int64{}, Opened: len(c.conns)}
	for cause, k := range c.byCause {
		cs.Causes[cause] = k.sum(0, len(*k))
	}
	if c.IP.IsValid() {
		cs.IP = c.IP.String()
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
		cs.OpenedAt = append(cs.OpenedAt, secs(iv.from.Sub(r.start)))
		cs.Conns = append(cs.Conns, Conn{Remote: iv.label, Opened: r.at(iv.from), GoAway: r.atOrNil(iv.goaway), Closed: r.atOrNil(iv.to), Reason: iv.reason})
	}
	for _, at := range c.restarts {
		cs.Restarts = append(cs.Restarts, secs(at.Sub(r.start)))
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
