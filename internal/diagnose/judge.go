package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/lbpolicy"
	"k8s.io/utils/ptr"
)

// judge sets r's verdict, cause, why, scenario and fixes from its steps.
func judge(r *Result) {
	ev, rt := r.Evidence, r.Rates
	svc := ev.Service.Namespace + "/" + ev.Service.Name
	switch {
	case len(ev.Pods) == 0:
		r.set(Unknown, "no-pods", noPods(ev.Service))
		return
	case readyPods(ev) == 0 && notReadyRate(rt) > 0 && len(directClients(r.Clients)) > 0:
		// Clients still call pods that left the endpoints (probes alone
		// do not count: the kubelet probes pods that are not ready too).
		stale(r, svc)
		return
	case rt.Counted == 0:
		r.set(Unknown, "no-samples", noSamples(r))
		return
	case rt.Total == 0:
		r.set(Unknown, "no-calls", fmt.Sprintf("no client calls reached the %d ready pods of %s during the %s window%s: run it while clients call the Service", rt.Counted, svc, seconds(ev.Window), probesNote(rt)))
		return
	}
	total := fmt.Sprintf("%.0f", rt.Total)
	if rt.Unit == connUnit {
		total = fmt.Sprintf("%.1f", rt.Total) // a mean: 0.4 is not none
	}
	skew := fmt.Sprintf("%d of %d ready pods idle, Jain's index %.2f, max/mean %.2f, %s %s in all", rt.Idle, rt.Counted, rt.Jain, rt.MaxMean, total, rt.Unit)
	balanced := rt.Idle == 0 && rt.Jain >= BalancedJain
	if balanced && rt.Unread > 0 {
		// The pods not read are what a scale-out adds, and what pinning
		// leaves idle: balance over the others proves nothing.
		r.set(Unknown, "unread-pods", fmt.Sprintf("%s over the pods read, but %s of %s could not be read (see step 1) and may be idle, so balance cannot be told", skew, plural(rt.Unread, "ready pod"), svc))
		return
	}
	direct := directClients(r.Clients)
	switch in := inboundRate(r.Clients); {
	case in >= ProxyShare*rt.Total:
		r.set(Unknown, "inbound-proxy", fmt.Sprintf("%s; %.0f%% of the traffic arrives from the pods' inbound sidecars, so the clients' own connections cannot be counted from the servers: read the client-side proxies' or the mesh's per-connection stats", skew, 100*in/rt.Total))
		return
	case r.Path.Proxy && balanced && rt.Unit != connUnit:
		r.set(Balanced, "", fmt.Sprintf("%s: an L7 proxy in the path (%.0f%% of the traffic comes through it) picks a pod per call", skew, 100*r.Path.ProxyShare))
		return
	case r.Path.Proxy:
		r.set(Unknown, "l7-proxy", fmt.Sprintf("%s, but an L7 proxy is in the path (%.0f%% of the traffic comes through it), which rules out client connection pinning: the skew is the proxy's own (its policy, its upstream connections, its view of the endpoints); read the proxy's stats", skew, 100*r.Path.ProxyShare))
		r.Reproduce = "pinlab lab run l7-proxy"
		return
	case len(direct) == 0:
		r.set(Unknown, "no-clients", fmt.Sprintf("%s, but no client sent more than %.1f %s over the connections the readings saw: the calls seen are probes' and scrapers', or went over connections that opened and closed between two readings; run it again with a longer --window while clients call the Service", skew, rt.BusyAbove, rt.Unit))
		return
	case balanced && rt.Unit == connUnit:
		connectionsOnly(r, skew, direct, "about evenly")
		return
	case balanced:
		r.set(Balanced, "", fmt.Sprintf("%s; %s%s%s", skew, connSummary(direct, rt), rotationNote(direct), xdsNote(ev.Service, false)))
		return
	case rotating(direct):
		r.set(Unknown, "rotating-connections", fmt.Sprintf("%s; %s%s. The clients are not pinned: they reconnect, and each new connection is a new pick (kube-proxy's, or the client's after a re-resolution), so over a short window some pods get more picks than others by chance; run again with a longer --window to average the picks out", skew, connSummary(direct, rt), rotationNote(direct)))
		r.Reproduce = "pinlab lab run scale-out --variant clusterip-age"
		return
	}
	judgeConnections(r, skew, direct)
	if r.Verdict == Pinned {
		r.Why += xdsNote(ev.Service, true)
	}
}

// xdsNote says, when Service s carries pinlab's xDS annotations, what
// clients dialling it through pinlab's xDS control plane get and what the
// servers can tell of them: from the pods' side an xDS client holds a
// connection to each pod, as a DNS round_robin client does, so only the
// clients' target tells them apart. pinned: the verdict found pinned
// clients, which therefore do not dial the xDS name. "" without such
// annotations.
func xdsNote(s evidence.Service, pinned bool) string {
	if !lbpolicy.HasAnnotations(s.Annotations) {
		return ""
	}
	port := "PORT"
	if _, n, _ := strings.Cut(s.Port, ":"); n != "" {
		port = n
	} else if s.Port != "" {
		port = s.Port
	}
	name := fmt.Sprintf("xds:///%s.%s:%s", s.Name, s.Namespace, port)
	p, od, err := lbpolicy.FromAnnotations(s.Annotations)
	if err != nil {
		return fmt.Sprintf(". The Service's xds.pinlab.dev annotations are invalid (%v): pinlab's xDS control plane ignores them, serves %s round_robin and says so in a Warning event on the Service", err, name)
	}
	what := p.Name
	if od != nil {
		what += ", outlier detection: " + od.String()
	}
	switch {
	case p.Name == lbpolicy.PickFirst:
		return fmt.Sprintf(". The Service is annotated for pinlab's xDS control plane (%s): clients dialling %s also hold one connection each, so the servers cannot tell xDS clients from these", what, name)
	case p.Name == lbpolicy.RingHash:
		return fmt.Sprintf(". The Service is annotated for pinlab's xDS control plane (%s): clients dialling %s send each call to the pod its hash key maps to, connecting to pods as keys need them, so the servers cannot tell xDS clients from others by their connections", what, name)
	case pinned:
		return fmt.Sprintf(". The Service is annotated for pinlab's xDS control plane (%s), but these clients are pinned, so they do not dial %s: clients that do get every ready endpoint and balance per call", what, name)
	}
	return fmt.Sprintf(". The Service is annotated for pinlab's xDS control plane (%s): clients dialling %s balance per call with that policy, and from the pods' side look like DNS round_robin clients (a connection to each pod), so the servers cannot tell which kind these are", what, name)
}

// judgeConnections sets r's verdict when the calls are skewed, no proxy
// is in the path and the connections do not rotate: from the direct
// clients' busy connections and the idle pods they leave.
func judgeConnections(r *Result, skew string, direct []Client) {
	ev, rt := r.Evidence, r.Rates
	svc := ev.Service.Namespace + "/" + ev.Service.Name
	idleNoConn, idleNewest := idlePods(rt, direct)
	switch {
	case rt.Unit == connUnit && len(idleNoConn) == 0:
		// Connections alone prove pinning only where they leave a pod
		// without any.
		connectionsOnly(r, skew, direct, "unevenly")
	case perPodNames(ev) != "" && (allOne(direct) || len(idleNoConn) > 0):
		r.set(Unknown, "per-pod-addressing", fmt.Sprintf("%s; %s. Service %s selects the pods of %s, whose headless Service gives each pod a DNS name of its own: clients that dial one pod by name on purpose (a shard, a leader) hold one connection to it, and then the skew is by design. If the clients dial %s itself, it is one connection per client (pick_first over a headless Service, or kube-proxy's one pick through a ClusterIP) and the fixes of pinning apply: the clients' target (dns:///%s.%s.svc... or a pod's name) settles it", skew, connSummary(direct, rt), svc, perPodNames(ev), ev.Service.Name, ev.Service.Name, ev.Service.Namespace))
	case allOne(direct) && ev.Service.Headless():
		r.set(Pinned, "headless-pick-first", fmt.Sprintf("%s; %s. Service %s is headless: DNS gives every ready pod's address, but a pick_first client (gRPC's default policy) connects to one of them and sends every call over that one HTTP/2 connection%s%s", skew, connSummary(direct, rt), svc, newestNote(rt, idleNewest), siblingNote(ev)))
		r.Reproduce, r.Fixes = "pinlab lab run scale-out --variant headless-pf", withoutProxyFix(r.Clients, headlessPickFirstFixes)
	case allOne(direct), !ev.Service.Headless() && len(idleNoConn) > 0:
		r.set(Pinned, "clusterip-connection", fmt.Sprintf("%s; %s. Service %s is a ClusterIP: kube-proxy picks a pod once per connection and gRPC sends every call over one long-lived HTTP/2 connection, so each client's calls all land on the pods its connections got%s%s%s", skew, connSummary(direct, rt), svc, sharedNote(direct), newestNote(rt, idleNewest), siblingNote(ev)))
		r.Reproduce, r.Fixes = "pinlab lab run scale-out --variant clusterip", withoutProxyFix(r.Clients, clusterIPFixes)
	case len(idleNewest) > 0 && len(idleNewest) == len(idleNoConn) && len(idleNoConn) == rt.Idle:
		r.set(Pinned, "added-after-resolution", fmt.Sprintf("%s; %s: the clients balance over the pods they resolved, but the %d pods created after every busy one (%s) have no busy connection: they were added after the clients' last DNS resolution, and gRPC re-resolves only when a connection breaks or a GOAWAY arrives (grpc-go at most once per 30 s), not on the TTL", skew, connSummary(direct, rt), len(idleNewest), list(idleNewest)))
		r.Reproduce, r.Fixes = "pinlab lab run no-reresolve", withoutProxyFix(r.Clients, staleFixes)
	case len(idleNoConn) > 0:
		r.set(Pinned, "few-connections", fmt.Sprintf("%s; %s: %d idle pods (%s) hold no busy client connection, so calls can only go where the clients' few connections are%s", skew, connSummary(direct, rt), len(idleNoConn), list(idleNoConn), sharedNote(direct)))
		r.Reproduce, r.Fixes = "pinlab lab run same-effect", withoutProxyFix(r.Clients, headlessPickFirstFixes)
	default:
		r.set(Unknown, "uneven-clients", fmt.Sprintf("%s; %s, and every pod holds busy client connections: the skew comes from clients calling at different rates over their connections, not from pods without any", skew, connSummary(direct, rt)))
	}
}

// connUnit is the Rates' Unit of connections read through exec.
const connUnit = "connections"

// connectionsOnly sets r's verdict when every ready pod holds busy client
// connections but only the connections were read (exec): how the calls
// spread over them cannot be told.
func connectionsOnly(r *Result, skew string, direct []Client, how string) {
	r.set(Unknown, "connections-only", fmt.Sprintf("%s; %s: every ready pod holds client connections, %s, but exec reads which connections are open, not the calls on them (/proc/net/tcp counts no bytes), so how the calls spread cannot be told: read the pods with pinlab-agent (--agent-image) or channelz", skew, connSummary(direct, r.Rates), how))
}

// siblingNote says, when Services of the other kind (headless or
// ClusterIP) select the same pods, that the servers cannot tell which
// name the clients dialled, and what the other one means; else "".
func siblingNote(ev evidence.Evidence) string {
	var other []string
	for _, s := range ev.Siblings {
		if s.Headless() != ev.Service.Headless() {
			other = append(other, fmt.Sprintf("%s (%s)", s.Name, kindName(s)))
		}
	}
	if len(other) == 0 {
		return ""
	}
	mech := "through a headless one a pick_first client connects to one address"
	if ev.Service.Headless() {
		mech = "through a ClusterIP kube-proxy picks a pod once per connection"
	}
	verb := "select"
	if len(other) == 1 {
		verb = "selects"
	}
	return fmt.Sprintf(". %s also %s these pods, and the servers cannot tell which name the clients dialled: %s, and the same one-connection pinning follows", strings.Join(other, " and "), verb, mech)
}

// kindName is "headless" or the Service's type.
func kindName(s evidence.Service) string {
	if s.Headless() {
		return "headless"
	}
	return s.Type
}

// perPodNames names the StatefulSets whose headless Service
// (spec.serviceName) is ev's or a headless twin of it, or returns "".
func perPodNames(ev evidence.Evidence) string {
	headless := map[string]bool{}
	if ev.Service.Headless() {
		headless[ev.Service.Name] = true
	}
	for _, s := range ev.Siblings {
		if s.Headless() {
			headless[s.Name] = true
		}
	}
	var out []string
	for _, w := range ev.Service.Workloads {
		if w.Kind == "StatefulSet" && headless[w.ServiceName] {
			out = append(out, "StatefulSet "+w.Name)
		}
	}
	return strings.Join(out, " and ")
}

// sharedNote says which clients hold several busy connections from one
// address; empty when none does.
func sharedNote(cls []Client) string {
	var out []string
	for _, c := range cls {
		if c.Shared != "" {
			out = append(out, fmt.Sprintf("%s holds %d busy connections from one address (%s)", c.Name, c.BusyOpen, c.Shared))
		}
	}
	if len(out) == 0 {
		return ""
	}
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("%d more alike", len(out)-3))
	}
	return "; " + strings.Join(out, "; ")
}

// withoutProxyFix replaces the L7 proxy fix with making the clients'
// sidecars carry the calls when some client already has one (a Hint): it
// is there, and the calls bypass it.
func withoutProxyFix(cls []Client, fixes []Fix) []Fix {
	if !slices.ContainsFunc(cls, func(c Client) bool { return c.Hint != "" && c.Busy > 0 }) {
		return fixes
	}
	out := slices.Clone(fixes)
	for i, f := range out {
		if f.Name == fixProxy.Name {
			out[i] = fixMeshBypassed
		}
	}
	return out
}

// probesNote gives the calls left out as probes', or "".
func probesNote(rt Rates) string {
	var sum float64
	for _, p := range rt.Pods {
		sum += p.Probes
	}
	if sum == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f calls/s of probes, on connections opened per call or from the node, left out)", sum)
}

// notServingNote says which ready pods report NOT_SERVING and whether
// calls still reach them (clients that do no health checking); empty when
// none does.
func notServingNote(rt Rates) string {
	if len(rt.NotServing) == 0 {
		return ""
	}
	var rate, failed float64
	for _, p := range rt.Pods {
		if p.notServing() {
			rate, failed = rate+p.Rate, failed+ptr.Deref(p.Failed, 0)
		}
	}
	verb := "report"
	if len(rt.NotServing) == 1 {
		verb = "reports"
	}
	what := fmt.Sprintf(". %s (%s) %s NOT_SERVING through grpc.health.v1, left out of the figures", plural(len(rt.NotServing), "ready pod"), list(rt.NotServing), verb)
	if rate > rt.BusyAbove {
		return what + fmt.Sprintf(": %.0f %s still reach it (%.0f failed/s), so the clients do no gRPC health checking", rate, rt.Unit, failed)
	}
	return what + ": no calls reach it, as clients with gRPC health checking take it out of rotation"
}

// notReadyNote names the pods not ready that still receive calls (over
// connections opened before: removing an endpoint closes none), which the
// figures leave out; empty when none does.
func notReadyNote(rt Rates) string {
	var names []string
	var rate float64
	for _, p := range rt.Pods {
		if !p.Ready && p.Err == "" && p.Rate > rt.BusyAbove {
			names, rate = append(names, p.Name), rate+p.Rate
		}
	}
	if len(names) == 0 {
		return ""
	}
	verb := "receive"
	if len(names) == 1 {
		verb = "receives"
	}
	return fmt.Sprintf(". %s not ready (%s) still %s %.0f %s, counted in the figures: taking a pod out of the EndpointSlices (and DNS) closes none of the connections clients already hold to it", plural(len(names), "pod"), list(names), verb, rate, rt.Unit)
}

func (r *Result) set(v Verdict, cause, why string) { r.Verdict, r.Cause, r.Why = v, cause, why }

// noPods says why the Service has no pods: a workload scaled to 0, or a
// selector that matches nothing.
func noPods(s evidence.Service) string {
	svc := s.Namespace + "/" + s.Name
	var zero []string
	for _, w := range s.Workloads {
		if w.Replicas == 0 {
			zero = append(zero, w.Kind+" "+s.Namespace+"/"+w.Name)
		}
	}
	eps := fmt.Sprintf("%d ready endpoints (%d in its EndpointSlices)", s.Ready, s.Endpoints)
	switch {
	case len(zero) > 0 && len(zero) == len(s.Workloads):
		return fmt.Sprintf("%s scaled to 0 replicas: Service %s has no pods and %s; scale it up to diagnose", strings.Join(zero, " and "), svc, eps)
	case len(s.Selector) == 0:
		return fmt.Sprintf("Service %s has no selector and its EndpointSlices name no pod: %s", svc, eps)
	}
	return fmt.Sprintf("Service %s has %s: its selector %s matches no pod", svc, eps, selector(s.Selector))
}

func selector(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

func readyPods(ev evidence.Evidence) int {
	n := 0
	for _, p := range ev.Pods {
		if p.Ready {
			n++
		}
	}
	return n
}

// notReadyRate is the calls per second the sampled pods that are not
// ready served.
func notReadyRate(rt Rates) float64 {
	var sum float64
	for _, p := range rt.Pods {
		if !p.Ready && p.Err == "" {
			sum += p.Rate
		}
	}
	return sum
}

// stale judges a Service none of whose pods is ready while they still
// serve calls: the clients hold connections or addresses from before the
// pods left the endpoints.
func stale(r *Result, svc string) {
	ev := r.Evidence
	rate := notReadyRate(r.Rates)
	var serving []string
	for _, p := range r.Rates.Pods {
		if p.Err == "" && p.Rate > r.Rates.BusyAbove {
			serving = append(serving, p.Name)
		}
	}
	r.set(Pinned, "stale-addresses", fmt.Sprintf("none of the %d pods of %s is ready (%d of %d endpoints ready), yet %s served %.0f %s; %s: the clients hold connections or addresses from before the pods left the Service's endpoints. Readiness only takes a pod out of the EndpointSlices and DNS: kube-proxy keeps established connections, and a gRPC channel keeps calling over its open connection and re-resolves only when it breaks; a new client would find no pod",
		len(ev.Pods), svc, ev.Service.Ready, ev.Service.Endpoints, list(serving), rate, r.Rates.Unit, connSummary(directClients(r.Clients), r.Rates)))
	r.Reproduce, r.Fixes = "pinlab lab run not-ready", staleAddressFixes
}

// noSamples explains why no ready pod was measured.
func noSamples(r *Result) string {
	ready := readyPods(r.Evidence)
	if ready == 0 {
		return fmt.Sprintf("none of the %d pods of %s/%s is ready", len(r.Evidence.Pods), r.Evidence.Service.Namespace, r.Evidence.Service.Name)
	}
	return fmt.Sprintf("none of the %d ready pods could be read (%s)", ready, strings.Join(r.Evidence.Problems, "; "))
}

// directClients are the clients that are not proxies and have a busy
// connection (above MinConnRate).
func directClients(cls []Client) []Client {
	var out []Client
	for _, c := range cls {
		if c.Proxy == "" && c.Busy > 0 {
			out = append(out, c)
		}
	}
	return out
}

// rotating reports whether at least half of the clients' busy connections
// opened during the window: the clients reconnect (a server
// MaxConnectionAge's GOAWAYs, say) rather than hold one connection.
func rotating(cls []Client) bool {
	busy, fresh := 0, 0
	for _, c := range cls {
		busy, fresh = busy+c.Busy, fresh+c.BusyNew
	}
	return busy > 0 && 2*fresh >= busy
}

// rotationNote says how many busy connections opened during the window,
// when the connections rotate.
func rotationNote(cls []Client) string {
	if !rotating(cls) {
		return ""
	}
	busy, fresh := 0, 0
	for _, c := range cls {
		busy, fresh = busy+c.Busy, fresh+c.BusyNew
	}
	return fmt.Sprintf("; %d of the %d busy connections opened during the window: connections rotate (a server MaxConnectionAge, or clients reconnecting)", fresh, busy)
}

func allOne(cls []Client) bool {
	for _, c := range cls {
		if c.BusyOpen != 1 && !(c.BusyOpen == 0 && c.Busy == 1) {
			return false
		}
	}
	return len(cls) > 0
}

// connSummary says how many connections the clients hold and where.
// busyWhat says what made a connection busy, in rt's unit.
func busyWhat(rt Rates) string {
	if rt.Unit == connUnit {
		return "open in two readings or more"
	}
	return fmt.Sprintf("above %.1f %s", rt.BusyAbove, rt.Unit)
}

func connSummary(cls []Client, rt Rates) string {
	if len(cls) == 0 {
		return "no client connection seen"
	}
	conns, pods := 0, map[string]bool{}
	lo, hi := cls[0].Busy, cls[0].Busy
	for _, c := range cls {
		conns += c.Busy
		lo, hi = min(lo, c.Busy), max(hi, c.Busy)
		for _, p := range c.BusyPods {
			pods[p] = true
		}
	}
	each := fmt.Sprintf("%d", lo)
	if lo != hi {
		each = fmt.Sprintf("%d to %d", lo, hi)
	}
	what := "connections"
	if hi == 1 {
		what = "connection"
	}
	reach := fmt.Sprintf("%d pods", len(pods))
	if len(pods) == 1 {
		reach = "1 pod"
	}
	if len(cls) == 1 {
		return fmt.Sprintf("1 client holds %s busy %s (%s), reaching %s", each, what, busyWhat(rt), reach)
	}
	return fmt.Sprintf("%d clients hold %s busy %s each (%d in all, %s), reaching %s", len(cls), each, what, conns, busyWhat(rt), reach)
}

// idlePods returns the idle pods without a busy connection of the
// clients, and the idle pods created after every busy one.
func idlePods(rt Rates, cls []Client) (noConn, newest []string) {
	for _, p := range rt.Pods {
		if !p.Idle {
			continue
		}
		if !slices.ContainsFunc(cls, func(c Client) bool { return slices.Contains(c.BusyPods, p.Name) }) {
			noConn = append(noConn, p.Name)
		}
		if p.Newest {
			newest = append(newest, p.Name)
		}
	}
	return noConn, newest
}

func newestNote(rt Rates, newest []string) string {
	if len(newest) == 0 {
		return ""
	}
	return fmt.Sprintf("; the %d pods created after every busy one (%s, a scale-out's, say) get calls only when some client opens a new connection", len(newest), list(newest))
}

// list names up to 4 pods.
func list(names []string) string {
	if len(names) > 4 {
		return strings.Join(names[:4], ", ") + fmt.Sprintf(" and %d more", len(names)-4)
	}
	return strings.Join(names, ", ")
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
