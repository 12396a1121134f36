// Package stats holds the measurements of one lab run as pure data: per-pod and
// per-client call counts in fixed time buckets, connection lifetimes, latency
// histograms, pod lifecycle and DNS lookups, and the summaries computed from
// them (rates, shares, Jain's fairness index). It does no I/O.
package stats

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// Bucket is the time resolution of call counts.
const Bucket = 100 * time.Millisecond

// PodPhase is a pod lifecycle event the recorder tracks.
type PodPhase string

// Pod lifecycle events, as seen in the API: created, Ready condition true or
// false, deletionTimestamp set, object gone; and, from the kubelet, a
// container killed, restarted, hung or resumed (the pod's object stays the
// same).
const (
	PodCreated     PodPhase = "created"
	PodReady       PodPhase = "ready"
	PodNotReady    PodPhase = "not-ready"
	PodTerminating PodPhase = "terminating"
	PodDeleted     PodPhase = "deleted"
	PodRestarted   PodPhase = "restarted"
	PodKilled      PodPhase = "killed"
	PodHung        PodPhase = "hung"
	PodResumed     PodPhase = "unhung"
)

// kubeletChanges are the kubelet events a window's pod changes show, by
// the event's name (kubelet.Config.Events).
var kubeletChanges = map[string]PodPhase{"restarted": PodRestarted, "killed": PodKilled, "hung": PodHung, "unhung": PodResumed}

// Recorder collects the events of one run. Callers pass absolute times;
// summaries express them as offsets from the start (SetStart), whenever it
// was set. Lifecycle events, connections, DNS queries, proxy connections
// and marks may be recorded before the start (they get negative offsets);
// calls should come after it, since calls are counted in buckets from the
// start as they are recorded and calls before it all count in the first
// bucket. A Recorder is safe
// for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	start    time.Time
	pods     map[string]*podSeries
	podOrder []string
	clients  map[string]*clientSeries
	peers    map[netip.Addr]string
	groups   map[string]string // peer label -> client group
	node     map[netip.Addr]bool
	latency  map[string][]Histogram // per client group, per second
	lag      map[string][]Histogram // schedule lag, per client group, per second
	cpu      []cpuAt
	dns      []dnsAt
	proxy    []proxyAt
	marks    []markAt
	steps    []stepAt
}

// interval is one connection's life. Times are absolute, so a connection
// opened before the start of load (SetStart) gets its true, negative
// offset when summarised.
type interval struct {
	from, to time.Time // to zero: still open
	peer     netip.AddrPort
	label    string
	reason   string    // why it closed, as the client observed it
	goaway   time.Time // when a GOAWAY arrived on it (zero: none seen)
}

type counts []uint32

func (c *counts) add(b int) {
	if b >= len(*c) {
		*c = append(*c, make([]uint32, b+1-len(*c))...)
	}
	(*c)[b]++
}

func (c counts) sum(from, to int) int64 {
	var n int64
	for b := max(from, 0); b < to && b < len(c); b++ {
		n += int64(c[b])
	}
	return n
}

type podSeries struct {
	name, ip   string
	services   []string // the target Services ("namespace/name") the pod backs
	phases     []phaseAt
	events     []markAt           // kubelet lifecycle events (sigterm, killed, ...)
	served     map[string]*counts // by peer label
	conns      []interval
	openByPeer map[netip.AddrPort]int
}

type clientSeries struct {
	ClientInfo
	byPod    map[string]*counts
	byCode   map[codes.Code]*counts
	byCause  map[string]*counts // failed calls only
	conns    []interval
	restarts []time.Time
}

// ClientInfo describes a load client: its name, its group, the Service its
// group targets ("namespace/name") and the source IP it dials from.
type ClientInfo struct {
	Name, Group, Service string
	IP                   netip.Addr
}

// Offset is a time since the recorder's start; it marshals to JSON as
// seconds with millisecond precision.
type Offset time.Duration

// MarshalJSON writes the offset in seconds.
func (o Offset) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, secs(time.Duration(o)), 'f', -1, 64), nil
}

// UnmarshalJSON reads an offset written by MarshalJSON.
func (o *Offset) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("stats: offset %s is not a number of seconds", b)
	}
	*o = Offset(math.Round(f * 1e9))
	return nil
}

// Seconds returns the offset in seconds.
func (o Offset) Seconds() float64 { return time.Duration(o).Seconds() }

type phaseAt struct {
	phase PodPhase
	at    time.Time
}

// PhaseChange is one pod lifecycle event at an offset from the start.
type PhaseChange struct {
	Phase PodPhase `json:"phase"`
	At    Offset   `json:"at_s"`
}

// DNSQuery is one answered cluster DNS query. At is ignored when recording.
type DNSQuery struct {
	At      Offset `json:"at_s"`
	Client  string `json:"client"`
	Name    string `json:"name"`
	Type    string `json:"type"`
	Rcode   string `json:"rcode"`
	Answers int    `json:"answers"`
}

// ProxyConn is one connection kube-proxy tracked: client -> VIP -> pod.
// Offsets are filled in by Summarize.
type ProxyConn struct {
	Opened   Offset  `json:"opened_s"`
	Closed   *Offset `json:"closed_s"` // nil (null) while still open
	Client   string  `json:"client"`
	VIP      string  `json:"vip"`
	Endpoint string  `json:"endpoint"`
	Pod      string  `json:"pod"`
}

// Mark is a timeline step or other note at an offset from the start.
type Mark struct {
	At   Offset `json:"at_s"`
	Text string `json:"text"`
}

type dnsAt struct {
	q  DNSQuery
	at time.Time
}

type proxyAt struct {
	c              ProxyConn
	opened, closed time.Time
}

type markAt struct {
	text string
	at   time.Time
}

// StepRecord is one timeline step as it was carried out.
type StepRecord struct {
	At   Offset `json:"at_s"`
	Name string `json:"name,omitempty"`
	Text string `json:"text"`
	// Pod is the pod a pod step acted on.
	Pod string `json:"pod,omitempty"`
	// Error is why the step failed; empty if it succeeded.
	Error string `json:"error,omitempty"`
}

type stepAt struct {
	s  StepRecord
	at time.Time
}

// NewRecorder returns an empty recorder whose offsets count from start until
// SetStart moves it.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{
		start:   start,
		pods:    map[string]*podSeries{},
		clients: map[string]*clientSeries{},
		peers:   map[netip.Addr]string{},
		groups:  map[string]string{},
		latency: map[string][]Histogram{},
		lag:     map[string][]Histogram{},
		node:    map[netip.Addr]bool{},
	}
}

// Start returns the time offsets count from.
func (r *Recorder) Start() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.start
}

// SetStart sets the time offsets count from: the start of load.
func (r *Recorder) SetStart(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start = t
}

func (r *Recorder) offset(at time.Time) time.Duration { return at.Sub(r.start) }

func bucketOf(d time.Duration) int {
	if d < 0 {
		return 0
	}
	return int(d / Bucket)
}

// Client registers a load client, so that server-side records from its IP
// are attributed to it and its group.
func (r *Recorder) Client(info ClientInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.client(info.Name).ClientInfo = info
	r.peers[info.IP] = info.Name
	r.groups[info.Name] = info.Group
}

// Peer labels the server-side records from ip (e.g. a gateway proxy's pod
// IP) as label, calls on behalf of client group group, without making it a
// load client.
func (r *Recorder) Peer(ip netip.Addr, label, group string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peers[ip] = label
	r.groups[label] = group
}

// Node registers an IP used by the node itself (kubelet probes); its
// connections are not counted as client connections.
func (r *Recorder) Node(ip netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.node[ip] = true
	r.peers[ip] = "kubelet"
}

func (r *Recorder) client(name string) *clientSeries {
	c := r.clients[name]
	if c == nil {
		c = &clientSeries{ClientInfo: ClientInfo{Name: name}, byPod: map[string]*counts{}, byCode: map[codes.Code]*counts{}, byCause: map[string]*counts{}}
		r.clients[name] = c
	}
	return c
}

func (r *Recorder) pod(name string) *podSeries {
	p := r.pods[name]
	if p == nil {
		p = &podSeries{name: name, served: map[string]*counts{}, openByPeer: map[netip.AddrPort]int{}}
		r.pods[name] = p
		r.podOrder = append(r.podOrder, name)
	}
	return p
}

func (r *Recorder) peerLabel(ip netip.Addr) string {
	if l, ok := r.peers[ip]; ok {
		return l
	}
	return ip.String()
}

// PodPhase records a lifecycle event of pod name (with its IP, if known).
func (r *Recorder) PodPhase(name, ip string, phase PodPhase, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pod(name)
	if ip != "" {
		p.ip = ip
	}
	p.phases = append(p.phases, phaseAt{phase: phase, at: at})
}

// PodServices records which target Services ("namespace/name") pod name
// backs, for per-Service summaries.
func (r *Recorder) PodServices(name string, services []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pod(name).services = services
}

// PodEvent records a kubelet lifecycle event of pod name ("prestop-start",
// "sigterm", "hard-stop", "killed", "restarted", ...).
func (r *Recorder) PodEvent(name, event string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pod(name)
	p.events = append(p.events, markAt{text: event, at: at})
}

// Served records one call a pod finished serving for peer.
func (r *Recorder) Served(podName string, peer netip.Addr, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pod(podName)
	l := r.peerLabel(peer)
	c := p.served[l]
	if c == nil {
		c = new(counts)
		p.served[l] = c
	}
	c.add(bucketOf(r.offset(at)))
}

// PodConn records a connection from peer to pod opening or closing.
func (r *Recorder) PodConn(podName string, peer netip.AddrPort, open bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pod(podName)
	p.conns = openOrClose(p.conns, interval{peer: peer, label: r.peerLabel(peer.Addr())}, open, at)
}

// openOrClose appends iv opened at at, or closes the last open interval to
// the same peer (taking iv's reason).
func openOrClose(ivs []interval, iv interval, open bool, at time.Time) []interval {
	if open {
		iv.from = at
		return append(ivs, iv)
	}
	for i := len(ivs) - 1; i >= 0; i-- {
		if ivs[i].peer == iv.peer && ivs[i].to.IsZero() {
			ivs[i].to, ivs[i].reason = at, iv.reason
			break
		}
	}
	return ivs
}

// Call records one call a client finished: the pod that answered (empty on
// error), its status code, the cause of a failure (e.g. "refused",
// "goaway", "deadline"; empty counts as "other"; ignored for OK), and its
// latency measured from the time the call was due (open-loop, so queueing
// delay counts).
func (r *Recorder) Call(clientName, podName string, code codes.Code, cause string, latency time.Duration, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.client(clientName)
	off := r.offset(due)
	b := bucketOf(off)
	if code == codes.OK {
		k := c.byPod[podName]
		if k == nil {
			k = new(counts)
			c.byPod[podName] = k
		}
		k.add(b)
	}
	k := c.byCode[code]
	if k == nil {
		k = new(counts)
		c.byCode[code] = k
	}
	k.add(b)
	if code != codes.OK {
		if cause == "" {
			cause = "other"
		}
		k := c.byCause[cause]
		if k == nil {
			k = new(counts)
			c.byCause[cause] = k
		}
		k.add(b)
	}
	s := max(int(off/time.Second), 0)
	h := r.latency[c.Group]
	if s >= len(h) {
		h = append(h, make([]Histogram, s+1-len(h))...)
		r.latency[c.Group] = h
	}
	h[s].Record(latency)
}

// Lag records how late the open-loop schedule launched a client's call due
// at due (the generator's schedule lag).
func (r *Recorder) Lag(clientName string, due time.Time, lag time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.client(clientName).Group
	s := max(int(r.offset(due)/time.Second), 0)
	h := r.lag[g]
	if s >= len(h) {
		h = append(h, make([]Histogram, s+1-len(h))...)
		r.lag[g] = h
	}
	h[s].Record(lag)
}

// CPU records the machine's and the process's CPU use over the second
// before at: machine is the busy share of all CPUs (0-1, steal included;
// negative when unknown), process the process's CPU time over the time of
// all CPUs, and steal the share the hypervisor gave to other guests
// (0 when unknown).
func (r *Recorder) CPU(at time.Time, machine, process, steal float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cpu = append(r.cpu, cpuAt{at: at, machine: machine, process: process, steal: steal})
}

type cpuAt struct {
	at                      time.Time
	machine, process, steal float64
}

// ClientConn records a client's connection to remote opening or closing;
// reason says what closed it, as the client observed it (for example
// "goaway max_age" or "eof"; empty for an open or when unknown).
func (r *Recorder) ClientConn(clientName string, remote netip.AddrPort, open bool, reason string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.client(clientName)
	c.conns = openOrClose(c.conns, interval{peer: remote, label: remote.String(), reason: reason}, open, at)
}

// ClientGoAway records that a client's connection to remote received a
// GOAWAY at at: the server asked it to stop opening streams there (the
// first GOAWAY counts).
func (r *Recorder) ClientGoAway(clientName string, remote netip.AddrPort, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.client(clientName)
	for i := len(c.conns) - 1; i >= 0; i-- {
		if iv := &c.conns[i]; iv.peer == remote && iv.to.IsZero() {
			if iv.goaway.IsZero() {
				iv.goaway = at
			}
			return
		}
	}
}

// ClientRestart records that a client replaced its channel.
func (r *Recorder) ClientRestart(clientName string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.client(clientName)
	c.restarts = append(c.restarts, at)
}

// DNS records one answered cluster DNS query.
func (r *Recorder) DNS(q DNSQuery, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dns = append(r.dns, dnsAt{q: q, at: at})
}

// ProxyConnOpened records a kube-proxy connection being tracked; the
// matching close is found by client and VIP.
func (r *Recorder) ProxyConnOpened(client netip.AddrPort, vip, endpoint, podName string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.proxy = append(r.proxy, proxyAt{
		c:      ProxyConn{Client: client.String(), VIP: vip, Endpoint: endpoint, Pod: podName},
		opened: at,
	})
}

// ProxyConnClosed records the end of the tracked connection from client to vip.
func (r *Recorder) ProxyConnClosed(client netip.AddrPort, vip string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := client.String()
	for i := len(r.proxy) - 1; i >= 0; i-- {
		if p := &r.proxy[i]; p.c.Client == cs && p.c.VIP == vip && p.closed.IsZero() {
			p.closed = at
			return
		}
	}
}

// Step records a timeline step carried out at at: its name (may be empty),
// its description, the pod it acted on (if any) and its error (nil if it
// succeeded). It is also a mark.
func (r *Recorder) Step(name, text, pod string, err error, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := StepRecord{Name: name, Text: text, Pod: pod}
	mark := text
	if err != nil {
		s.Error = err.Error()
		mark += " failed: " + s.Error
	}
	r.steps = append(r.steps, stepAt{s: s, at: at})
	r.marks = append(r.marks, markAt{text: mark, at: at})
}

// StepPod returns the pod the step called name acted on ("" if none yet).
func (r *Recorder) StepPod(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.steps) - 1; i >= 0; i-- {
		if r.steps[i].s.Name == name {
			return r.steps[i].s.Pod
		}
	}
	return ""
}

// Mark records a timeline note.
func (r *Recorder) Mark(text string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = append(r.marks, markAt{text: text, at: at})
}

// Totals returns the number of calls finished so far and how many failed;
// for progress lines.
func (r *Recorder) Totals() (calls, failed int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clients {
		for code, k := range c.byCode {
			n := k.sum(0, len(*k))
			calls += n
			if code != codes.OK {
				failed += n
			}
		}
	}
	return calls, failed
}

func sortedKeys[M ~map[K]V, K ~string, V any](m M) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// PodCalls returns the calls pod name has served for clients so far (not
// kubelet probes).
func (r *Recorder) PodCalls(name string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[name]
	if !ok {
		return 0
	}
	c := p.clientServed(nil)
	return c.sum(0, len(c))
}
