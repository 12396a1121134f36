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
	conns      connFacts
	reconnects []reconnect // conns.reconnects
	lookups    []float64   // starts of DNS lookup rounds for the target name
	added      int
	addedAt    []float64 // when the added pods first turned Ready, distinct
	firstAdded *float64  // first call served by an added pod
	usedPods   int       // pods with calls in the last window
	restarts   []string
}

func gather(v plan.Variant, g plan.Group, s *stats.Summary) facts {
	ws := windowsOf(s, g.Name)
	f := facts{g: g, last: ws[len(ws)-1]}
	f.lookups = lookupRounds(s.DNS, g.Target.Host)
	var mine []stats.ClientStats
	for _, c := range s.Clients {
		if c.Group == g.Name || c.Group == "" {
			mine = append(mine, c)
		}
	}
	f.clients = len(mine)
	f.conns = readConns(mine, s.End)
	f.reconnects = f.conns.reconnects
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
			if !added[ps.Name] && ps.ReadyAt != nil {
				f.addedAt = append(f.addedAt, *ps.ReadyAt)
			}
			added[ps.Name] = true
			if ps.FirstCall != nil && (f.firstAdded == nil || *ps.FirstCall < *f.firstAdded) {
				first := *ps.FirstCall
				f.firstAdded = &first
			}
		}
	}
	f.added = len(added)
	slices.Sort(f.addedAt)
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
	if r := windowOverload(f.last); r != "" {
		parts = append(parts, fmt.Sprintf("the machine was overloaded in window %q (%s), so the machine, not the system, shaped its timing figures", f.last.Name, r))
	}
	if share := float64(failed) / float64(failed+f.last.ClientOK); share > 0.001 {
		parts = append(parts, fmt.Sprintf("%.1f%% of calls failed in window %q (%s)", 100*share, f.last.Name, stats.CodeCounts(f.last.Errors)))
	}
	switch {
	case f.g.Target.XDS:
		pick := f.g.Policy + " picked one per call"
		if f.g.Policy == "pick_first" {
			pick = "pick_first kept each client on one"
		}
		parts = append(parts, "the xDS control plane sent each client the Service's ready endpoints and "+pick)
	case !f.g.Target.Headless:
		parts = append(parts, fmt.Sprintf("kube-proxy picked a pod once per new connection to the ClusterIP and each client held %.1f connections on average, so every call on a connection went to its pod", f.last.ConnsPerClient))
	case f.g.Policy == "pick_first":
		parts = append(parts, fmt.Sprintf("pick_first connected each client to one address of the DNS answer: %s used %s", plural(f.clients, "client"), plural(f.usedPods, "pod")))
	default:
		parts = append(parts, fmt.Sprintf("%s spread each client's calls over every address it had resolved", f.g.Policy))
	}
	parts = append(parts, f.connectionLine())
	if n := len(f.restarts); n > 4 {
		parts = append(parts, fmt.Sprintf("%d client restarts (%s, ...): a new channel resolves and connects afresh", n, strings.Join(f.restarts[:3], ", ")))
	} else if n > 0 {
		parts = append(parts, fmt.Sprintf("restarted %s: a new channel resolves and connects afresh", strings.Join(f.restarts, ", ")))
	}
	if f.g.Target.Headless && !f.g.Target.XDS {
		parts = append(parts, f.lookupLine(minResolve))
	}
	parts = append(parts, f.ejectedLine(), f.addedLine(), f.lifecycleLine())
	parts = slices.DeleteFunc(parts, func(s string) bool { return s == "" })
	return strings.Join(parts, "; ") + "."
}

// ejectedLine names the pods an xDS Service's outlier detection most
// likely kept out of the last window: ready at its end, never added, no
// call served in it, while other pods served the clients. The control
// plane sends a ready pod as HEALTHY, and round_robin, least_request and
// weighted_round_robin pick among every connected endpoint (the last two
// weigh them, but leave none at zero calls for a whole window when it
// answers), so outlier detection (gRFC A50) is the likely cause; the
// report cannot see grpc-go's ejections themselves, and says so. "" when
// the Service has no outlier detection, ejects nothing, or its policy is
// pick_first or ring_hash (which leave pods out by design), or no pod was
// left out.
func (f facts) ejectedLine() string {
	od := f.g.Target.OutlierDetection
	if !f.g.Target.XDS || od == nil || !od.Ejects() || f.g.Policy == "pick_first" || f.g.Policy == "ring_hash" || f.usedPods == 0 {
		return ""
	}
	var out []string
	for _, p := range f.last.Pods {
		if p.State == stats.PodReady && !p.Added && p.Calls == 0 {
			out = append(out, p.Name)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf("%s %s ready yet served no call in window %q while %s served the rest: most likely outlier detection (%s) ejected %s (grpc-go's ejections are not observed, only their effect)",
		strings.Join(out, ", "), wasWere(len(out)), f.last.Name, plural(f.usedPods, "pod"), od, itThem(len(out)))
}

// itThem is "it" for one, "them" for more.
func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// connectionLine says how many connections the clients opened after
// start-up and, by what was observed, why; which clients connected late;
// and which connections ended without being replaced.
func (f facts) connectionLine() string {
	var parts []string
	if late := f.conns.late; len(late) > 0 {
		their := "their"
		if len(late) == 1 {
			their = "its"
		}
		parts = append(parts, fmt.Sprintf("%s made %s first connection late, %s (lookups or connects at start-up were slow or lost)", f.who(len(late)), their, when(late)))
	}
	if n := len(f.reconnects); n > 0 {
		line := fmt.Sprintf("%s opened %s after start-up (first at %.1fs): %s", f.who(f.clients), plural(n, "new connection"), f.reconnects[0].at, f.causes())
		if w := longestWait(f.reconnects); w.at-w.since > 1 {
			line += fmt.Sprintf(" (the longest wait for a replacement: %.1fs, from %.1fs to %.1fs)", w.at-w.since, w.since, w.at)
		}
		parts = append(parts, line+f.pickNote())
	}
	if u := f.conns.unreplaced; len(u) > 0 {
		parts = append(parts, fmt.Sprintf("%s ended and %s not replaced: %s, %s",
			plural(len(u), "connection"), wasWere(len(u)), endingCauses(u), when([]float64{u[0].at, u[len(u)-1].at})))
	}
	if len(parts) > 0 {
		return strings.Join(parts, "; ")
	}
	if age := f.g.Target.MaxConnectionAge; age > 0 {
		return fmt.Sprintf("MaxConnectionAge %v was set but no connection was replaced during the run", age)
	}
	return "no connection broke or was replaced, so nothing made the clients reconnect"
}

// who names the clients: "the client" for a group of one.
func (f facts) who(n int) string {
	if f.clients == 1 {
		return "the client"
	}
	if n == f.clients {
		return "clients"
	}
	return plural(n, "client")
}

func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// causes counts the reconnects by cause, in order of first appearance.
func (f facts) causes() string {
	cs := make([]string, len(f.reconnects))
	for i, r := range f.reconnects {
		cs[i] = r.cause
	}
	return tally(cs, f.causeText)
}

// endingCauses counts the endings by cause.
func endingCauses(es []ending) string {
	cs := make([]string, len(es))
	for i, e := range es {
		cs[i] = e.cause
	}
	return tally(cs, endText)
}

// tally counts causes in order of first appearance: "3 <text of a>, 1
// <text of b>".
func tally(causes []string, text func(string) string) string {
	counts := map[string]int{}
	var order []string
	for _, c := range causes {
		if counts[c] == 0 {
			order = append(order, c)
		}
		counts[c]++
	}
	out := make([]string, len(order))
	for i, c := range order {
		out[i] = fmt.Sprintf("%d %s", counts[c], text(c))
	}
	return strings.Join(out, ", ")
}

// pickNote says how a new connection found its pod.
func (f facts) pickNote() string {
	switch t := f.g.Target; {
	case t.XDS:
		return "; each to an endpoint the control plane listed"
	case t.Headless && anyGoAway(f.reconnects):
		return "; each GOAWAY also asked the resolver to re-resolve"
	case !t.Headless && t.ClientIPAffinity:
		return "; ClientIP session affinity sent each client's new connections to the pod it had before, while the affinity lasted"
	case !t.Headless:
		return "; each a fresh random kube-proxy pick"
	}
	return ""
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

func anyGoAway(rs []reconnect) bool {
	return slices.ContainsFunc(rs, func(r reconnect) bool { return strings.HasPrefix(r.cause, "goaway") })
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

// endText names what ended a connection that was not replaced.
func endText(cause string) string {
	switch {
	case cause == causeMaxAge:
		return "closed by a MaxConnectionAge GOAWAY"
	case cause == causeGracefulStop:
		return "closed by a pod's graceful-stop GOAWAY"
	case strings.HasPrefix(cause, "goaway"):
		return "closed by a GOAWAY (" + cause + ")"
	case cause == "eof" || cause == "reset":
		return "closed by a pod without GOAWAY (" + cause + ")"
	}
	return "closed (cause not observed)"
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
	what := "the pod added"
	verb := "got its first call"
	if f.added > 1 {
		what, verb = fmt.Sprintf("the %d pods added", f.added), "got their first call"
	}
	what += " (Ready " + when(f.addedAt) + ")"
	if f.firstAdded == nil {
		return what + " never got a call"
	}
	return fmt.Sprintf("%s %s at %.1fs and %.1f%% of calls in window %q (Jain's index %.2f)",
		what, verb, *f.firstAdded, 100*f.last.AddedShare, f.last.Name, f.last.Jain)
}

// when says when things happened, to a tenth of a second: "at 9.1s",
// "at 9.1s and 12.1s", "from 10.0s to 10.6s".
func when(ts []float64) string {
	var ds []string
	for _, t := range ts {
		if d := fmt.Sprintf("%.1fs", t); !slices.Contains(ds, d) {
			ds = append(ds, d)
		}
	}
	switch len(ds) {
	case 0:
		return ""
	case 1:
		return "at " + ds[0]
	case 2:
		return "at " + ds[0] + " and " + ds[1]
	}
	return "from " + ds[0] + " to " + ds[len(ds)-1]
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
	case stats.PodKilled:
		return "was killed"
	case stats.PodHung:
		return "hung"
	case stats.PodResumed:
		return "resumed"
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
