package verdict

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// startup is how long after the start of load a client connection still
// counts as part of start-up rather than a reconnect.
const startup = time.Second

// facts are what explain reads off one group's plan and measurements.
type facts struct {
	g          plan.Group
	clients    int
	last       stats.WindowStats
	reconnects []reconnect
	lookups    []float64 // starts of DNS lookup rounds for the target name
	added      int
	firstAdded *float64 // first call served by an added pod
	scaleAt    *float64
	usedPods   int // pods with calls in the last window
	restarts   []string
}

func gather(v plan.Variant, g plan.Group, s *stats.Summary) facts {
	ws := windowsOf(s, g.Name)
	if len(v.Groups) == 1 {
		ws = s.Windows
	}
	f := facts{g: g, last: ws[len(ws)-1]}
	f.lookups = lookupRounds(s.DNS, g.Target.Host)
	var mine []stats.ClientStats
	for _, c := range s.Clients {
		if c.Group == g.Name || c.Group == "" {
			mine = append(mine, c)
		}
	}
	f.clients = len(mine)
	f.reconnects = reconnects(mine, s.End)
	for _, c := range mine {
		for _, at := range c.Restarts {
			f.restarts = append(f.restarts, fmt.Sprintf("%s at %.1fs", c.Name, at))
		}
	}
	added := map[string]bool{}
	for _, w := range ws {
		for _, ps := range w.Pods {
			if !ps.Added {
				continue
			}
			added[ps.Name] = true
			if ps.FirstCall != nil && (f.firstAdded == nil || *ps.FirstCall < *f.firstAdded) {
				first := *ps.FirstCall
				f.firstAdded = &first
			}
		}
	}
	f.added = len(added)
	for i, st := range v.Steps {
		if _, ok := st.Action.(plan.Scale); ok && i < len(s.Steps) && s.Steps[i].Error == "" {
			at := s.Steps[i].At.Seconds()
			f.scaleAt = &at
			break
		}
	}
	for _, ps := range f.last.Pods {
		if ps.Calls > 0 {
			f.usedPods++
		}
	}
	return f
}

// lookupRounds returns the start times of groups of A queries for host
// (queries less than a second apart belong to one round).
func lookupRounds(qs []stats.DNSQuery, host string) []float64 {
	var out []float64
	last := math.Inf(-1)
	for _, q := range qs {
		if q.Type != "A" || !strings.EqualFold(strings.TrimSuffix(q.Name, "."), host) {
			continue
		}
		at := q.At.Seconds()
		if at-last > 1 {
			out = append(out, at)
		}
		last = at
	}
	return out
}

// explain says, per client group, why the variant's numbers look as they
// do, from what was measured (what was configured only names things).
func explain(p *plan.Plan, v plan.Variant, s stats.Summary) []Why {
	if len(s.Windows) == 0 {
		return nil
	}
	var out []Why
	for _, g := range v.Groups {
		out = append(out, Why{Group: g.Name, Line: gather(v, g, &s).line(p.MinResolutionInterval)})
	}
	return out
}

func (f facts) line(minResolve time.Duration) string {
	var failed int64
	for _, n := range f.last.Errors {
		failed += n
	}
	if f.last.ClientOK == 0 {
		if failed == 0 {
			return fmt.Sprintf("no call finished in window %q.", f.last.Name)
		}
		return fmt.Sprintf("no call succeeded in window %q: %s (causes: %s).", f.last.Name, stats.CodeCounts(f.last.Errors), stats.CodeCounts(f.last.ErrorCauses))
	}
	if x := f.g.Settings.L7Proxy; x != nil {
		return fmt.Sprintf("an L7 %s proxy (%s) kept each client's one connection and picked a pod for every call from the EndpointSlices it watches, so %s got calls in window %q (Jain's index %.2f) with %.1f connections per client.",
			x.Placement, x.Policy, plural(f.usedPods, "pod"), f.last.Name, f.last.Jain, f.last.ConnsPerClient)
	}
	switch f.g.Settings.Protocol {
	case plan.ProtocolHTTP:
		return fmt.Sprintf("each client's HTTP/1.1 keep-alive pool held %.1f connections on average (%d opened in window %q), each a kube-proxy pick or a fresh resolution, so calls spread over %s (Jain's index %.2f): milder than one gRPC connection, not even.",
			f.last.ConnsPerClient, f.last.ConnsOpened, f.last.Name, plural(f.usedPods, "pod"), f.last.Jain)
	case plan.ProtocolWebSocket:
		return fmt.Sprintf("each client held one WebSocket, so all its messages went to the pod that connection reached: %s used %s in window %q (Jain's index %.2f).",
			plural(f.clients, "client"), plural(f.usedPods, "pod"), f.last.Name, f.last.Jain)
	}
	var parts []string
	if share := float64(failed) / float64(failed+f.last.ClientOK); share > 0.001 {
		parts = append(parts, fmt.Sprintf("%.1f%% of calls failed in window %q (%s)", 100*share, f.last.Name, stats.CodeCounts(f.last.Errors)))
	}
	switch {
	case !f.g.Target.Headless:
		parts = append(parts, fmt.Sprintf("kube-proxy picked a pod once per new connection to the ClusterIP and each client held %.1f connections on average, so every call on a connection went to its pod", f.last.ConnsPerClient))
	case f.g.Policy == "pick_first":
		parts = append(parts, fmt.Sprintf("pick_first connected each client to one address of the DNS answer: %s used %s", plural(f.clients, "client"), plural(f.usedPods, "pod")))
	default:
		parts = append(parts, "round_robin spread each client's calls over every address it had resolved")
	}
	parts = append(parts, f.connectionLine())
	if n := len(f.restarts); n > 4 {
		parts = append(parts, fmt.Sprintf("%d client restarts (%s, ...): a new channel resolves and connects afresh", n, strings.Join(f.restarts[:3], ", ")))
	} else if n > 0 {
		parts = append(parts, fmt.Sprintf("restarted %s: a new channel resolves and connects afresh", strings.Join(f.restarts, ", ")))
	}
	if f.g.Target.Headless {
		parts = append(parts, f.lookupLine(minResolve))
	}
	parts = append(parts, f.addedLine(), f.lifecycleLine())
	parts = slices.DeleteFunc(parts, func(s string) bool { return s == "" })
	return strings.Join(parts, "; ") + "."
}

// connectionLine says how many connections the clients opened after
// start-up and, by what was observed, why.
func (f facts) connectionLine() string {
	age := f.g.Target.MaxConnectionAge
	n := len(f.reconnects)
	if n == 0 {
		if age > 0 {
			return fmt.Sprintf("MaxConnectionAge %v was set but no connection was replaced during the run", age)
		}
		return "no connection broke or was replaced, so nothing made the clients reconnect"
	}
	counts := map[string]int{}
	var order []string
	for _, r := range f.reconnects {
		if counts[r.cause] == 0 {
			order = append(order, r.cause)
		}
		counts[r.cause]++
	}
	var causes []string
	for _, c := range order {
		causes = append(causes, fmt.Sprintf("%d %s", counts[c], f.causeText(c)))
	}
	line := fmt.Sprintf("clients opened %s after start-up (first at %.1fs): %s", plural(n, "new connection"), f.reconnects[0].at, strings.Join(causes, ", "))
	if w := longestWait(f.reconnects); w.at-w.since > 1 {
		line += fmt.Sprintf(" (the longest wait for a replacement: %.1fs, from %.1fs to %.1fs)", w.at-w.since, w.since, w.at)
	}
	switch {
	case f.g.Target.Headless && anyGoAway(order):
		line += "; each GOAWAY also asked the resolver to re-resolve"
	case !f.g.Target.Headless:
		line += "; each a fresh random kube-proxy pick"
	}
	return line
}

// longestWait returns the reconnect that came longest after its cause.
func longestWait(rs []reconnect) reconnect {
	var w reconnect
	for _, r := range rs {
		if r.at-r.since > w.at-w.since {
			w = r
		}
	}
	return w
}

func anyGoAway(causes []string) bool {
	return slices.ContainsFunc(causes, func(c string) bool { return strings.HasPrefix(c, "goaway") })
}

// causeText names a reconnect's cause for the line.
func (f facts) causeText(cause string) string {
	switch {
	case cause == causeMaxAge && f.g.Target.MaxConnectionAge > 0:
		return fmt.Sprintf("after a MaxConnectionAge GOAWAY (max_age; MaxConnectionAge %v)", f.g.Target.MaxConnectionAge)
	case cause == causeMaxAge:
		return "after a MaxConnectionAge GOAWAY (max_age)"
	case cause == causeGracefulStop:
		return "after a pod's graceful-stop GOAWAY (a pod terminating)"
	case strings.HasPrefix(cause, "goaway"):
		return "after a GOAWAY (" + cause + ")"
	case cause == "eof" || cause == "reset":
		return "after a pod closed the connection without GOAWAY (" + cause + ": crash, kill or reset)"
	case cause == causeRestart:
		return "after a client restart"
	case cause == causeNewAddress:
		return "to a new address (no connection had closed: a re-resolution or a balancer change)"
	}
	return "after a connection closed (cause not observed)"
}

func (f facts) lookupLine(minResolve time.Duration) string {
	if len(f.lookups) == 0 {
		return ""
	}
	times := make([]string, len(f.lookups))
	for i, t := range f.lookups {
		if math.Abs(t) < 0.05 {
			t = 0 // no "-0.0s" for lookups just before the start
		}
		times[i] = fmt.Sprintf("%.1fs", t)
	}
	line := "DNS lookups of the Service at " + strings.Join(times, ", ")
	if len(f.lookups) == 1 {
		if len(f.reconnects) > 0 {
			return line + fmt.Sprintf(" only: the reconnects from %.1fs asked for a new lookup, but grpc-go resolves at most once per %v", f.reconnects[0].at, minResolve)
		}
		return line + " only: the clients never re-resolved"
	}
	if len(f.reconnects) > 0 && f.lookups[1]-f.reconnects[0].at > 1 {
		line += fmt.Sprintf(": the first reconnect at %.1fs asked for a new lookup, but grpc-go resolves at most once per %v", f.reconnects[0].at, minResolve)
	}
	return line
}

func (f facts) addedLine() string {
	if f.added == 0 {
		return ""
	}
	when := ""
	if f.scaleAt != nil {
		when = fmt.Sprintf(" at %.0fs", *f.scaleAt)
	}
	what := plural(f.added, "pod") + " added" + when
	if f.added > 1 {
		what = "the " + what
	} else {
		what = "the pod added" + when
	}
	if f.firstAdded == nil {
		return what + " never got a call"
	}
	verb := "got their first call"
	if f.added == 1 {
		verb = "got its first call"
	}
	return fmt.Sprintf("%s %s at %.1fs and %.1f%% of calls in window %q (Jain's index %.2f)",
		what, verb, *f.firstAdded, 100*f.last.AddedShare, f.last.Name, f.last.Jain)
}

// maxNamed bounds the pods a line names.
const maxNamed = 3

// lifecycleLine names the pods of the last window that were not serving
// normally at its end, or that changed during it: not ready, terminating,
// deleted or restarted, with when.
func (f facts) lifecycleLine() string {
	var named []string
	n := 0
	for _, ps := range f.last.Pods {
		what := podChange(ps)
		if what == "" {
			continue
		}
		n++
		if len(named) < maxNamed {
			named = append(named, ps.Name+" "+what)
		}
	}
	if n == 0 {
		return ""
	}
	if n > maxNamed {
		named = append(named, fmt.Sprintf("and %d more", n-maxNamed))
	}
	return fmt.Sprintf("in window %q %s", f.last.Name, strings.Join(named, ", "))
}

// podChange describes what happened to a pod in a window ("" for a pod
// Ready throughout): its changes, or its state when it was not Ready all
// along.
func podChange(ps stats.PodStats) string {
	var parts []string
	for _, c := range ps.Changes {
		parts = append(parts, fmt.Sprintf("%s at %.1fs", phaseText(c.Phase), c.At.Seconds()))
	}
	if len(parts) == 0 && ps.State != stats.PodReady && ps.State != "" {
		parts = append(parts, "was "+strings.ReplaceAll(string(ps.State), "-", " ")+" throughout")
	}
	return strings.Join(parts, ", then ")
}

func phaseText(p stats.PodPhase) string {
	switch p {
	case stats.PodNotReady:
		return "turned not ready"
	case stats.PodReady:
		return "turned Ready"
	case stats.PodTerminating:
		return "began terminating"
	case stats.PodDeleted:
		return "was deleted"
	case stats.PodRestarted:
		return "restarted"
	case stats.PodCreated:
		return "pending"
	}
	return string(p)
}

// plural says "1 pod", "2 pods".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
