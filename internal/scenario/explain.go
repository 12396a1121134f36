package scenario

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/stats"
	"k8s.io/apimachinery/pkg/labels"
)

// startup is how long after the start of load a client connection still
// counts as part of start-up rather than a reconnect.
const startup = time.Second

// facts are what explain reads off a variant's plan and measurements.
type facts struct {
	headless   bool
	policy     string
	age        time.Duration
	clients    int
	last       stats.WindowStats
	reconnects []float64 // client connection opens after start-up, seconds
	lookups    []float64 // starts of DNS lookup rounds for the target name
	added      int
	firstAdded *float64 // first call served by an added pod
	scaleAt    *float64
	usedPods   int // pods with calls in the last window
	restarts   []string
}

func gather(p Plan, s stats.Summary) facts {
	t := p.Clients[0].Target
	f := facts{headless: t.Headless(), policy: p.Clients[0].Policy, age: targetAge(p), clients: len(p.Clients)}
	if len(s.Windows) > 0 {
		f.last = s.Windows[len(s.Windows)-1]
	}
	for _, c := range s.Clients {
		for _, at := range c.OpenedAt {
			if at > startup.Seconds() {
				f.reconnects = append(f.reconnects, at)
			}
		}
	}
	sort.Float64s(f.reconnects)
	for _, c := range s.Clients {
		for _, at := range c.Restarts {
			f.restarts = append(f.restarts, fmt.Sprintf("%s at %.1fs", c.Name, at))
		}
	}
	f.lookups = lookupRounds(s.DNS, t.Host)
	added := map[string]bool{}
	for _, w := range s.Windows {
		for _, ps := range w.Pods {
			if !ps.Added {
				continue
			}
			added[ps.Name] = true
			if ps.FirstCall != nil && (f.firstAdded == nil || *ps.FirstCall < *f.firstAdded) {
				v := *ps.FirstCall
				f.firstAdded = &v
			}
		}
	}
	f.added = len(added)
	for _, m := range s.Marks {
		if strings.Contains(m.Text, "scale") && f.scaleAt == nil {
			v := m.At.Seconds()
			f.scaleAt = &v
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

// targetAge returns the MaxConnectionAge of the pods behind the first
// client's Service, read from their Deployment's container args.
func targetAge(p Plan) time.Duration {
	svc := p.Clients[0].Target.Service
	for _, o := range p.Objects {
		w, ok := asWorkload(o)
		if !ok || w.Namespace != namespaceOfObj(svc.Namespace) || len(svc.Spec.Selector) == 0 ||
			!labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.Template.Labels)) {
			continue
		}
		for _, c := range w.Template.Spec.Containers {
			if args, err := kubelet.ContainerArgs(&c); err == nil {
				if a, err := pod.ParseArgs(args); err == nil && a.MaxConnectionAge > 0 {
					return a.MaxConnectionAge
				}
			}
		}
	}
	return 0
}

// explain says in one line why a variant's numbers look as they do, from
// what was configured and what was measured.
func explain(p Plan, s stats.Summary, minResolve time.Duration) string {
	if len(s.Windows) == 0 {
		return ""
	}
	f := gather(p, s)
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
	c0 := p.Clients[0]
	if x := c0.Settings.L7Proxy; x != nil {
		return fmt.Sprintf("an L7 %s proxy (%s) kept each client's one connection and picked a pod for every call from the EndpointSlices it watches, so %s got calls in window %q (Jain's index %.2f) with %.1f connections per client.",
			cmp.Or(x.Placement, "sidecar"), cmp.Or(x.Policy, "round_robin"), plural(f.usedPods, "pod"), f.last.Name, f.last.Jain, f.last.ConnsPerClient)
	}
	switch c0.Settings.Protocol {
	case "http":
		return fmt.Sprintf("each client's HTTP/1.1 keep-alive pool held %.1f connections on average (%d opened in window %q), each a kube-proxy pick or a fresh resolution, so calls spread over %s (Jain's index %.2f): milder than one gRPC connection, not even.",
			f.last.ConnsPerClient, f.last.ConnsOpened, f.last.Name, plural(f.usedPods, "pod"), f.last.Jain)
	case "websocket":
		return fmt.Sprintf("each client held one WebSocket, so all its messages went to the pod that connection reached: %s used %s in window %q (Jain's index %.2f).",
			plural(f.clients, "client"), plural(f.usedPods, "pod"), f.last.Name, f.last.Jain)
	}
	var parts []string
	if share := float64(failed) / float64(failed+f.last.ClientOK); share > 0.001 {
		parts = append(parts, fmt.Sprintf("%.1f%% of calls failed in window %q (%s)", 100*share, f.last.Name, stats.CodeCounts(f.last.Errors)))
	}
	switch {
	case !f.headless:
		parts = append(parts, fmt.Sprintf("kube-proxy picked a pod once per new connection to the ClusterIP and each client held %.1f connections on average, so every call on a connection went to its pod", f.last.ConnsPerClient))
	case f.policy == "pick_first":
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
	if f.headless {
		parts = append(parts, f.lookupLine(minResolve))
	}
	parts = append(parts, f.addedLine())
	var out []string
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	line := strings.Join(out, "; ") + "."
	if gs := p.groups(); len(gs) > 1 {
		line = fmt.Sprintf("for client group %s (connections and lookups count every group): %s", gs[0].Name, line)
	}
	return line
}

func (f facts) connectionLine() string {
	n := len(f.reconnects)
	switch {
	case f.age > 0 && n > 0:
		how := "each a fresh random kube-proxy pick"
		if f.headless {
			how = "each GOAWAY also asked the resolver to re-resolve"
		}
		return fmt.Sprintf("MaxConnectionAge %v made clients open %s after start-up (first at %.1fs; %s)", f.age, plural(n, "new connection"), f.reconnects[0], how)
	case f.age > 0:
		return fmt.Sprintf("MaxConnectionAge %v was set but no connection was replaced during the run", f.age)
	case n == 0:
		return "no connection broke or was replaced, so nothing made the clients reconnect"
	}
	return fmt.Sprintf("clients opened %s after start-up (first at %.1fs)", plural(n, "new connection"), f.reconnects[0])
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
			return line + fmt.Sprintf(" only: the reconnects from %.1fs asked for a new lookup, but grpc-go resolves at most once per %v", f.reconnects[0], minResolve)
		}
		return line + " only: the clients never re-resolved"
	}
	if len(f.reconnects) > 0 && f.lookups[1]-f.reconnects[0] > 1 {
		line += fmt.Sprintf(": the first reconnect at %.1fs asked for a new lookup, but grpc-go resolves at most once per %v", f.reconnects[0], minResolve)
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
	if f.firstAdded == nil {
		return fmt.Sprintf("the %d pods added%s never got a call", f.added, when)
	}
	return fmt.Sprintf("the %d pods added%s got their first call at %.1fs and %.1f%% of calls in window %q (Jain's index %.2f)",
		f.added, when, *f.firstAdded, 100*f.last.AddedShare, f.last.Name, f.last.Jain)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
