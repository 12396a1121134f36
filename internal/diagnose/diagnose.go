// Package diagnose judges an evidence.Evidence along the diagnostic path
// for pinning: step 1 compares per-pod request rates (skew
// toward a few pods is the symptom), step 2 counts the connections each
// client holds and to which pods (one or a few confirms pinning), step 3
// looks for an L7 proxy in the path (its presence rules client connection
// pinning out) and tells the Service's kind; then a verdict, pinned,
// balanced or could not tell, names the cause with the figures that show
// it and the fixes that apply, each with its trade-off and the built-in
// lab scenario that reproduces it.
//
// Diagnose is pure: no I/O, no clock. Package report renders a Result.
package diagnose

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/stats"
	"k8s.io/utils/ptr"
)

// Verdict is the answer to "are this Service's calls pinned?".
type Verdict string

// Verdicts.
const (
	Pinned   Verdict = "pinned"
	Balanced Verdict = "balanced"
	Unknown  Verdict = "could not tell"
)

// Thresholds of the verdict.
const (
	// BalancedJain is the least Jain's index over the ready pods' rates
	// that counts as balanced (with no idle pod).
	BalancedJain = 0.9
	// ProxyShare is the share of calls that must come through a proxy's
	// addresses (a gateway's endpoints, a sidecar's loopback, a client
	// with a sidecar) for the proxy to count as in the path.
	ProxyShare = 0.5
	// MinConnRate is the calls per second above which a connection counts
	// as carrying a client's load: a kubelet gRPC probe every second, a
	// health checker or a scraper stay at or below it. Connections at or
	// below it are shown but left out of the judgement.
	MinConnRate = 1.5
	// MinConnBytes is MinConnRate for byte counts (an agent's readings):
	// bytes per second, both ways together, above which a connection
	// counts as carrying a client's load. A small unary call between
	// grpc-go client and server costs about 230 bytes both ways (HTTP/2
	// HEADERS and DATA frames, the trailers, window updates and BDP
	// pings; measured in the lab by TestDiagnoseThroughAgent), so this is
	// about 1.5 such calls a second; an idle connection carries none,
	// keepalive pings a few bytes a second.
	MinConnBytes = 350.0
	// MinConnOpen is MinConnRate for connections read through exec,
	// which gives no traffic, only which connections are open: the share
	// of its life a connection was seen open above which it counts. Its
	// life runs from the reading before the one it first appeared in, so
	// a connection seen in two readings or more has at least 0.5 (1 when
	// the first reading saw it); one seen in one reading only has 0, and
	// one opened and closed between two readings is not seen at all.
	MinConnOpen = 0.3
	// ProbeRate is the calls per second a pod may receive on no
	// connection any reading saw (connections opened and closed between
	// two readings) and have them taken for probes and left out: the
	// kubelet's gRPC liveness and readiness probes at their shortest
	// period (1 s) open a connection per probe, as grpc_health_probe does.
	// Above it, such calls are counted as clients' (short-lived
	// connections).
	ProbeRate = 2.0
	// PoolShare: a client's connection counts as carrying its load when
	// its rate is at least this share of the client's mean per
	// connection (so a round_robin client's 0.9 calls/s on each of 10
	// pods counts, a stray health-check connection beside a busy one
	// does not).
	PoolShare = 0.25
)

// Result is a diagnosis.
type Result struct {
	// Evidence is what was observed.
	Evidence evidence.Evidence `json:"evidence"`
	// Rates is step 1, Clients step 2 and Path step 3.
	Rates   Rates    `json:"rates"`
	Clients []Client `json:"clients"`
	Path    Path     `json:"path"`
	// Verdict is the answer; Cause names it ("clusterip-connection",
	// "headless-pick-first", "added-after-resolution", "few-connections",
	// "stale-addresses", "rotating-connections", "l7-proxy", "inbound-proxy", "unread-pods",
	// "no-pods", "no-samples", "no-calls", "no-clients", "uneven-clients",
	// "per-pod-addressing",
	// or "" when balanced); Why says it in plain words with the figures.
	Verdict Verdict `json:"verdict"`
	Cause   string  `json:"cause,omitempty"`
	Why     string  `json:"why"`
	// Reproduce is the built-in scenario that shows the cause, as a
	// command line; empty when there is none.
	Reproduce string `json:"reproduce,omitempty"`
	// Fixes apply to the cause, best first.
	Fixes []Fix `json:"fixes,omitempty"`
}

// Rates is step 1: the pods' call rates over the window.
type Rates struct {
	Pods []PodRate `json:"pods"`
	// Total is the ready sampled pods' calls per second; Jain, MaxMean and
	// Idle are computed over them (Idle: below stats.IdleFraction of a
	// fair share).
	Total   float64 `json:"total_per_sec"`
	Jain    float64 `json:"jain"`
	MaxMean float64 `json:"max_over_mean"`
	Idle    int     `json:"idle"`
	// Counted is how many pods the figures are over: the ready ones that
	// were sampled, and the pods not ready that still receive calls (over
	// MinConnRate: connections opened before they turned not ready).
	// Unread is how many ready pods were not (no reading, or
	// no series in Prometheus): balance over the others says nothing of
	// them.
	Counted int `json:"counted"`
	Unread  int `json:"unread"`
	// Unit is what the rates count: "calls/s", "bytes/s" (both ways)
	// when the evidence is an agent's, or "connections" (the mean number
	// open: a pod's client connections, a connection's share of its life
	// it was open) when it was read through exec; BusyAbove is the rate
	// above which a connection carries a client's load in that unit
	// (MinConnRate, MinConnBytes or MinConnOpen).
	Unit      string  `json:"unit"`
	BusyAbove float64 `json:"busy_above"`
	// NotServing names the ready pods whose grpc.health.v1 status is
	// NOT_SERVING: left out of the figures, as health-checking clients
	// leave them out of rotation.
	NotServing []string `json:"not_serving,omitempty"`
}

// PodRate is one pod's line of step 1.
type PodRate struct {
	Name  string `json:"name"`
	IP    string `json:"ip"`
	Ready bool   `json:"ready"`
	// Rate is in Rates.Unit: calls started per second, bytes per second,
	// or the mean number of client connections (exec); Share its part of
	// Total (0 for pods not counted).
	Rate  float64 `json:"rate_per_sec"`
	Share float64 `json:"share"`
	Idle  bool    `json:"idle"`
	// Failed is calls that failed per second; nil (absent from JSON) for
	// a pod not read, and when the unit is not calls/s: an agent's bytes
	// and exec's connections tell no call's outcome.
	Failed *float64 `json:"failed_per_sec,omitempty"`
	// Probes is the calls per second left out of Rate as probes': those
	// on no connection a reading saw, up to ProbeRate, and those on the
	// node's connections at or below MinConnRate (channelz rates only;
	// Prometheus's leave the health service out by name).
	Probes float64 `json:"probes_per_sec,omitempty"`
	// Conns is how many client connections the pod holds at the last
	// reading.
	Conns int `json:"conns"`
	// Newest is true for the pods created after every busy pod, when some
	// pods are idle (those a scale-out added, typically).
	Newest bool `json:"newest,omitempty"`
	// Err says why the pod was not sampled.
	Err string `json:"error,omitempty"`
	// Health is its grpc.health.v1 status, when read.
	Health string `json:"health,omitempty"`
}

// notServing reports whether the pod's health service says NOT_SERVING.
func (p PodRate) notServing() bool { return p.Health == "NOT_SERVING" }

// counted reports whether the pod is in the figures: sampled, not
// NOT_SERVING, and ready or still receiving calls.
func (p PodRate) counted(busyAbove float64) bool {
	return p.Err == "" && !p.notServing() && (p.Ready || p.Rate > busyAbove)
}

// Client is one line of step 2: the connections of one remote address.
type Client struct {
	// Name is the client's pod name, the Service whose endpoint it is, or
	// its IP when unknown; Kind is "pod", "endpoint", "node" or "unknown".
	Name string `json:"name"`
	IP   string `json:"ip"`
	Kind string `json:"kind"`
	// Conns is how many connections it holds to the Service's pods, and
	// Pods which pods, sorted.
	Conns int      `json:"conns"`
	Pods  []string `json:"pods"`
	// Busy counts its connections that carried its load (over their own
	// life, more than Rates.BusyAbove, MinConnRate calls/s say, or, when the client sends more
	// than MinConnRate in all, at least PoolShare of its mean per
	// connection), and BusyPods their pods.
	Busy     int      `json:"busy_conns"`
	BusyPods []string `json:"busy_pods,omitempty"`
	// BusyOpen counts its busy connections open at the last reading.
	BusyOpen int `json:"busy_open_conns,omitempty"`
	// BusyNew counts its busy connections that opened during the window
	// (a reconnect: connections rotating under a server MaxConnectionAge,
	// say).
	BusyNew int `json:"busy_new_conns,omitempty"`
	// Rate is what it sent over those connections during the window, in
	// Rates.Unit (calls/s, bytes/s, or the mean number open).
	Rate float64 `json:"rate_per_sec"`
	// Proxy says why this client is an L7 proxy or has one, or is empty.
	// A sidecar (its container or its injector's annotation) counts only
	// when the client's calls reach more than one pod (or there is only
	// one ready): a balancing proxy spreads them.
	Proxy string `json:"proxy,omitempty"`
	// Hint says why it might have a proxy that is not judged to be in
	// the path: a sidecar whose calls all reach one of several pods.
	Hint string `json:"hint,omitempty"`
	// Shared says what several busy connections open from one address
	// at the last reading can be: a channel pool, or several
	// clients behind one address (a node's SNAT). Empty for one.
	Shared string `json:"shared,omitempty"`
}

// Path is step 3.
type Path struct {
	// Kind is "ClusterIP" or "headless" (or the Service's type:
	// NodePort, LoadBalancer, ExternalName).
	Kind string `json:"kind"`
	// Proxy is true when an L7 proxy is judged to be in the path; Signs
	// lists everything that points at one, even below ProxyShare.
	Proxy bool     `json:"proxy"`
	Signs []string `json:"signs,omitempty"`
	// ProxyShare is the share of calls that came through proxy addresses.
	ProxyShare float64 `json:"proxy_share"`
	// Siblings are the Services of the other kind (headless or ClusterIP)
	// that select the same pods, as "name (kind)": clients may dial those.
	Siblings []string `json:"siblings,omitempty"`
}

// Fix is a fix that applies to the cause.
type Fix struct {
	Name     string `json:"name"`
	How      string `json:"how"`
	TradeOff string `json:"trade_off"`
	// Scenario is the lab command that shows the fix at work.
	Scenario string `json:"scenario"`
}

// Diagnose judges ev.
func Diagnose(ev evidence.Evidence) Result {
	r := Result{Evidence: ev}
	r.Rates = rates(ev)
	r.Clients = clients(ev, readyPods(ev), r.Rates.BusyAbove)
	r.Path = path(ev, r.Clients, r.Rates.Total)
	judge(&r)
	r.Why += notServingNote(r.Rates) + notReadyNote(r.Rates)
	return r
}

// perSec turns a count over the window into a rate.
func perSec(n int64, w time.Duration) float64 {
	if w <= 0 {
		return 0
	}
	return float64(n) / w.Seconds()
}

// busyAbove is the rate above which a connection carries a client's load
// in ev's unit.
func busyAbove(ev evidence.Evidence) float64 {
	switch ev.Unit {
	case "bytes":
		return MinConnBytes
	case evidence.UnitConnMs:
		return MinConnOpen
	}
	return MinConnRate
}

// rateOf is n of ev's unit over w in the Rates' unit: per second, or,
// for connection-milliseconds, the mean number of connections open.
func rateOf(ev evidence.Evidence, n int64, w time.Duration) float64 {
	if ev.Unit == evidence.UnitConnMs {
		return perSec(n, w) / 1000
	}
	return perSec(n, w)
}

// rates is step 1.
func rates(ev evidence.Evidence) Rates {
	r := Rates{Unit: unit(ev), BusyAbove: busyAbove(ev)}
	var xs []float64
	for _, p := range ev.Pods {
		pr := PodRate{Name: p.Name, IP: p.IP, Ready: p.Ready, Err: p.Err, Conns: openConns(p), Health: p.Health}
		if p.Sampled() {
			started := p.Calls.Started
			span := ev.Window
			if ev.RatesFrom != "prometheus" && p.Span > 0 {
				span = p.Span // a pod read in fewer rounds: its own readings' span
			}
			if ev.RatesFrom == "channelz" {
				probes := probeCalls(ev, p, span)
				started -= probes
				pr.Probes = perSec(probes, span)
			}
			pr.Rate = rateOf(ev, started, span)
			if r.Unit == "calls/s" {
				pr.Failed = ptr.To(perSec(p.Calls.Failed, span))
			}
			if p.Ready && pr.notServing() {
				r.NotServing = append(r.NotServing, p.Name)
			} else if pr.counted(r.BusyAbove) {
				xs = append(xs, pr.Rate)
				r.Total += pr.Rate
			}
		} else if p.Ready {
			r.Unread++
		}
		r.Pods = append(r.Pods, pr)
	}
	r.Counted = len(xs)
	r.Jain, r.MaxMean, r.Idle = stats.JainIndex(xs), stats.MaxOverMean(xs), stats.CountIdle(xs)
	if r.Total == 0 {
		return r
	}
	fair := r.Total / float64(r.Counted)
	var busyNewest time.Time
	for i := range r.Pods {
		p := &r.Pods[i]
		if !p.counted(r.BusyAbove) {
			continue
		}
		p.Share = p.Rate / r.Total
		p.Idle = p.Rate < stats.IdleFraction*fair
		if c := ev.Pods[i].Created; !p.Idle && c.After(busyNewest) {
			busyNewest = c
		}
	}
	for i := range r.Pods {
		if p := &r.Pods[i]; p.Idle && ev.Pods[i].Created.After(busyNewest) {
			p.Newest = true
		}
	}
	return r
}

// openConns counts p's connections open at the last reading.
func openConns(p evidence.Pod) int {
	n := 0
	for _, c := range p.Conns {
		if !c.Closed {
			n++
		}
	}
	return n
}

// connRate is the calls per second c carried over its own life (the
// window when its life is unknown), the life taken as at least one
// reading interval and 1 s: a reading late by a few milliseconds does not
// turn one call into a busy connection.
func connRate(c evidence.Conn, ev evidence.Evidence) float64 {
	life := c.Life
	if life <= 0 {
		life = ev.Window
	}
	floor := time.Second
	if ev.Readings > 1 {
		floor = max(floor, ev.Window/time.Duration(ev.Readings-1))
	}
	return rateOf(ev, c.Calls, min(ev.Window, max(life, floor)))
}

// probeCalls returns the calls of p taken for probes': those on no
// connection a reading saw, when at most ProbeRate per second, and those
// on the node's connections that carried at most MinConnRate.
func probeCalls(ev evidence.Evidence, p evidence.Pod, span time.Duration) int64 {
	var onConns, node int64
	for _, c := range p.Conns {
		onConns += c.Calls
		if ap, err := netip.ParseAddrPort(c.Remote); err == nil && ev.Peers[ap.Addr().String()].Kind == "node" && connRate(c, ev) <= MinConnRate {
			node += c.Calls
		}
	}
	loose := max(0, p.Calls.Started-onConns)
	if perSec(loose, span) > ProbeRate {
		loose = 0
	}
	return min(p.Calls.Started, node+loose)
}

// conn is one connection of a client, for clients' second pass.
type conn struct {
	pod         string
	rate        float64
	new, closed bool
}

// clients is step 2: connections grouped by remote IP; ready is how many
// of the Service's pods are ready.
func clients(ev evidence.Evidence, ready int, busyAbove float64) []Client {
	byIP := map[string]*Client{}
	conns := map[string][]conn{}
	for _, p := range ev.Pods {
		for _, c := range p.Conns {
			ap, err := netip.ParseAddrPort(c.Remote)
			if err != nil {
				continue
			}
			ip := ap.Addr().String()
			cl := byIP[ip]
			if cl == nil {
				cl = newClient(ev, ip, ap.Addr(), p.IP)
				byIP[ip] = cl
			}
			if !c.Closed {
				cl.Conns++
			}
			cl.Rate += rateOf(ev, c.Calls, ev.Window)
			if !slices.Contains(cl.Pods, p.Name) {
				cl.Pods = append(cl.Pods, p.Name)
			}
			conns[ip] = append(conns[ip], conn{p.Name, connRate(c, ev), c.New, c.Closed})
		}
	}
	var out []Client
	for ip, c := range byIP {
		busy(c, conns[ip], busyAbove)
		sidecarInPath(c, ready)
		slices.Sort(c.Pods)
		slices.Sort(c.BusyPods)
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Client) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP)))
	})
	return out
}

// newClient names the client at ip (addr) of a pod at podIP and says why
// it is, or has, a proxy.
func newClient(ev evidence.Evidence, ip string, addr netip.Addr, podIP string) *Client {
	cl := &Client{IP: ip, Name: ip, Kind: "unknown"}
	if peer, ok := ev.Peers[ip]; ok {
		cl.Kind = peer.Kind
		switch {
		case peer.Kind == "node" && peer.Name != "":
			cl.Name = "node " + peer.Name
		case peer.Kind == "node":
			cl.Name = "node " + ip // pods without spec.nodeName
		case peer.Name != "":
			cl.Name = peer.Name
		}
		cl.Proxy = sidecarSign(peer.Containers, peer.Annotations)
		if peer.Kind == "endpoint" {
			cl.Proxy = "an endpoint of Service " + peer.Namespace + "/" + peer.Name + " (a gateway or proxy in front)"
		}
	}
	if cl.Proxy == "" {
		cl.Proxy = loopbackSign(addr, podIP)
	}
	return cl
}

// busy sets c's busy connections and pods from its connections cs, and
// says why one address holds several.
func busy(c *Client, cs []conn, busyAbove float64) {
	withCalls := 0
	for _, x := range cs {
		if x.rate > 0 {
			withCalls++
		}
	}
	for _, x := range cs {
		// The node's connections are judged one by one: each of the
		// kubelet's probes is its own.
		pooled := c.Kind != "node" && c.Rate > busyAbove && x.rate > 0 && x.rate >= PoolShare*c.Rate/float64(withCalls)
		if x.rate > busyAbove || pooled {
			c.Busy++
			if x.new {
				c.BusyNew++
			}
			if !x.closed {
				c.BusyOpen++
			}
			if !slices.Contains(c.BusyPods, x.pod) {
				c.BusyPods = append(c.BusyPods, x.pod)
			}
		}
	}
	switch {
	case c.BusyOpen <= 1:
	case c.Kind == "pod":
		c.Shared = "a pool of channels, or several processes in the pod"
	default:
		c.Shared = "a pool of channels, or several clients behind one address (a node's SNAT, a NAT gateway)"
	}
}

// sidecarInPath demotes c's sidecar to a Hint when its calls all reach
// one of several ready pods: a balancing proxy would spread them.
func sidecarInPath(c *Client, ready int) {
	if c.Kind != "pod" || c.Proxy == "" || inbound(*c) || len(c.BusyPods) != 1 || ready < 2 {
		return
	}
	c.Hint = fmt.Sprintf("%s, but its calls reach 1 of %d ready pods over %s: the sidecar does not balance them (traffic not intercepted, or its port skipped)", c.Proxy, ready, plural(c.Busy, "connection"))
	c.Proxy = ""
}
