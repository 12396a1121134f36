package proxy

import (
	"container/list"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultAffinityTimeout is how long a ClientIP affinity entry lives when
// sessionAffinityConfig.clientIP.timeoutSeconds is unset:
// v1.DefaultClientIPServiceAffinitySeconds, 10800 s (3 h), as the API server
// defaults it.
const DefaultAffinityTimeout = time.Duration(v1.DefaultClientIPServiceAffinitySeconds) * time.Second

// maxAffinitySeconds is the largest timeoutSeconds API validation accepts
// (core.MaxClientIPServiceAffinitySeconds).
const maxAffinitySeconds = 86400

// Per-mode constants of the affinity state, from the kernel.
const (
	// recentListSize is how many client IPs one xt_recent list remembers:
	// the module parameter ip_list_tot, 100 by default; a new client evicts
	// the one least recently --set.
	recentListSize = 100
	// templateRecheck is how long an IPVS persistence template that still
	// controls connections lives on when its timer fires; its timeout also
	// becomes this (ip_vs_conn_expire, expire_later: cp->timeout = 60*HZ).
	templateRecheck = 60 * time.Second
	// minSweep is the smallest table size at which expired entries are
	// swept out.
	minSweep = 64
)

// affinityTimeout returns svc's ClientIP affinity timeout, or 0 for
// sessionAffinity None. Values the API server would reject are logged once
// and replaced: an unknown sessionAffinity by None, a timeoutSeconds outside
// 1..86400 by the default.
func (p *Proxier) affinityTimeout(key types.NamespacedName, svc *v1.Service) time.Duration {
	switch a := svc.Spec.SessionAffinity; a {
	case "", v1.ServiceAffinityNone:
		return 0
	case v1.ServiceAffinityClientIP:
	default:
		p.warnOnce("affinity/"+key.String()+"/"+string(a), "unknown sessionAffinity; using None", "service", key, "sessionAffinity", a)
		return 0
	}
	secs := v1.DefaultClientIPServiceAffinitySeconds
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		secs = *c.ClientIP.TimeoutSeconds
	}
	if secs <= 0 || secs > maxAffinitySeconds {
		p.warnOnce("affinity/"+key.String()+"/"+time.Duration(secs).String(), "sessionAffinityConfig.clientIP.timeoutSeconds outside 1..86400; using the default",
			"service", key, "timeoutSeconds", secs, "default", DefaultAffinityTimeout)
		return DefaultAffinityTimeout
	}
	return time.Duration(secs) * time.Second
}

// sticky is the ClientIP affinity state of one VIP. Its methods are safe for
// concurrent use: the accept loop chooses, the Run goroutine updates, relay
// goroutines release.
type sticky interface {
	// choose returns the endpoint for a new connection from client under
	// table t (t.affinity > 0): the client's live entry if its endpoint is
	// in t.eps, else pk's pick, which becomes the client's entry. A non-nil
	// releaser must be called when the connection ends.
	choose(client netip.Addr, t *table, now time.Time, pk picker) (Endpoint, releaser)
	// update adapts the state to a newly installed table, forgetting what
	// the dataplane's rules would lose with it.
	update(cur *table)
}

// releaser ends one connection's hold on an affinity entry.
type releaser interface {
	release(now time.Time)
}

func newSticky(mode Mode) sticky {
	switch mode {
	case ModeIPVS:
		return &templates{}
	case ModeNFTables:
		return &recentLists{}
	}
	return &recentLists{limit: recentListSize}
}

// findEndpoint returns the endpoint of eps (sorted by address) at addr.
func findEndpoint(eps []Endpoint, addr netip.AddrPort) (Endpoint, bool) {
	i, ok := slices.BinarySearchFunc(eps, addr, func(e Endpoint, a netip.AddrPort) int { return e.Addr.Compare(a) })
	if !ok {
		return Endpoint{}, false
	}
	return eps[i], true
}

// recentLists is affinity as iptables and nftables modes program it: one
// list of client IPs per endpoint (an xt_recent list named after the
// KUBE-SEP chain, or an nftables set with a timeout), filled by every new
// connection the endpoint gets (`-m recent --set`, `update @set { ip saddr }`)
// and checked, for each eligible endpoint, before the random pick
// (`-m recent --rcheck --seconds T --reap`, `ip saddr @set goto`). An entry
// therefore lives T after the client's last new connection to that endpoint,
// whether or not connections are still open; and it dies with the endpoint's
// rules when the endpoint stops being eligible. One client has at most one
// live entry (it only moves on when its entry is gone), so the lab keeps one
// entry per client.
type recentLists struct {
	mu      sync.Mutex
	limit   int // clients per endpoint list; 0: no limit (nftables sets)
	clients map[netip.Addr]*recentEntry
	lists   map[netip.AddrPort]*list.List // with a limit: entries per endpoint, least recently set first
	sweepAt int
}

type recentEntry struct {
	client netip.Addr
	ep     netip.AddrPort
	last   time.Time
	elem   *list.Element // in lists[ep], with a limit
}

func (r *recentLists) choose(client netip.Addr, t *table, now time.Time, pk picker) (Endpoint, releaser) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// --rcheck --seconds matches while the last stamp is no older than T.
	if e := r.clients[client]; e != nil && now.Sub(e.last) <= t.affinity {
		if ep, ok := findEndpoint(t.eps, e.ep); ok {
			r.set(client, ep.Addr, now, t.affinity)
			return ep, nil
		}
	}
	ep := pk.pick(t.eps)
	r.set(client, ep.Addr, now, t.affinity)
	return ep, nil
}

// set records a new connection from client to ep at now (--set), evicting
// the least recently set client of a full list.
func (r *recentLists) set(client netip.Addr, ep netip.AddrPort, now time.Time, timeout time.Duration) {
	e := r.clients[client]
	if e == nil {
		r.sweep(now, timeout)
		e = &recentEntry{client: client}
		if r.clients == nil {
			r.clients = map[netip.Addr]*recentEntry{}
		}
		r.clients[client] = e
	}
	if e.elem != nil && e.ep != ep {
		r.unlist(e)
	}
	e.ep, e.last = ep, now
	if r.limit == 0 {
		return
	}
	if e.elem != nil {
		r.lists[ep].MoveToBack(e.elem)
		return
	}
	l := r.lists[ep]
	if l == nil {
		l = list.New()
		if r.lists == nil {
			r.lists = map[netip.AddrPort]*list.List{}
		}
		r.lists[ep] = l
	}
	e.elem = l.PushBack(e)
	if l.Len() > r.limit {
		old := l.Remove(l.Front()).(*recentEntry)
		old.elem = nil
		delete(r.clients, old.client)
	}
}

func (r *recentLists) unlist(e *recentEntry) {
	l := r.lists[e.ep]
	l.Remove(e.elem)
	e.elem = nil
	if l.Len() == 0 {
		delete(r.lists, e.ep)
	}
}

// sweep drops expired entries once the table has doubled since the last
// sweep, keeping memory proportional to the live clients.
func (r *recentLists) sweep(now time.Time, timeout time.Duration) {
	if len(r.clients) < r.sweepAt {
		return
	}
	r.forget(func(e *recentEntry) bool { return now.Sub(e.last) > timeout })
	r.sweepAt = max(minSweep, 2*len(r.clients))
}

// update forgets every entry when affinity is off and otherwise the entries
// of endpoints no longer eligible: their rules, and the xt_recent list or
// nftables set with them, are deleted.
func (r *recentLists) update(cur *table) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.clients) == 0 {
		return
	}
	r.forget(func(e *recentEntry) bool {
		_, ok := findEndpoint(cur.eps, e.ep)
		return cur.affinity == 0 || !ok
	})
}

func (r *recentLists) forget(drop func(*recentEntry) bool) {
	for c, e := range r.clients {
		if drop(e) {
			if e.elem != nil {
				r.unlist(e)
			}
			delete(r.clients, c)
		}
	}
}

// templates is affinity as ipvs mode programs it: the virtual service is
// persistent with the Service's timeout (kube-proxy sets FlagPersistent and
// Timeout), and IPVS keeps one persistence template per client IP
// (ip_vs_sched_persist). A new connection from a client with a valid
// template goes to the template's real server; otherwise the scheduler (rr)
// picks and a template is made. Each new connection restarts the template's
// timer with its timeout. When the timer fires while connections it
// controls are still open, the template lives on, re-armed for 60 s with its
// timeout now 60 s (ip_vs_conn_expire). A template whose real server is gone
// or has weight 0 is invalid (ip_vs_check_template with kube-proxy's
// expire_quiescent_template=1); one whose endpoint comes back before it
// expires is valid again, as IPVS revives the real server from its trash.
//
// The lab counts a connection as controlled until its relay ends; the kernel
// keeps the IPVS connection entry for its TCP state timeout afterwards (120 s
// in TIME_WAIT by default), so real templates can outlive the lab's by that
// long.
type templates struct {
	mu      sync.Mutex
	clients map[netip.Addr]*template
	sweepAt int
}

// template is one IPVS persistence template. Its fields are guarded by mu,
// the table's lock.
type template struct {
	mu        *sync.Mutex
	ep        netip.AddrPort
	timeout   time.Duration // the service's, until a delayed expiry makes it 60 s
	deadline  time.Time     // when the timer fires next
	open      int           // connections controlled (n_control)
	idleSince time.Time     // when open last fell to 0
}

func (r *templates) choose(client netip.Addr, t *table, now time.Time, pk picker) (Endpoint, releaser) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tp := r.clients[client]
	var ep Endpoint
	ok := false
	if tp != nil && tp.alive(now) {
		ep, ok = findEndpoint(t.eps, tp.ep)
	}
	if !ok {
		ep = pk.pick(t.eps)
		tp = &template{mu: &r.mu, ep: ep.Addr, timeout: t.affinity}
		r.sweep(now)
		if r.clients == nil {
			r.clients = map[netip.Addr]*template{}
		}
		r.clients[client] = tp
	}
	tp.deadline = now.Add(tp.timeout)
	tp.open++
	return ep, tp
}

// alive reports whether tp has not expired by now, replaying the timer
// firings since its deadline: each firing at which tp still controlled a
// connection re-armed it for templateRecheck.
func (tp *template) alive(now time.Time) bool {
	if now.Before(tp.deadline) {
		return true
	}
	if tp.open > 0 {
		// Controlled at every firing since: re-armed past now.
		n := now.Sub(tp.deadline)/templateRecheck + 1
		tp.deadline = tp.deadline.Add(n * templateRecheck)
		tp.timeout = templateRecheck
		return true
	}
	if !tp.idleSince.After(tp.deadline) {
		return false // nothing controlled when the timer fired
	}
	// Re-armed until the first firing after the last connection ended.
	n := (tp.idleSince.Sub(tp.deadline) + templateRecheck - 1) / templateRecheck
	last := tp.deadline.Add(n * templateRecheck)
	if !now.Before(last) {
		return false
	}
	tp.deadline, tp.timeout = last, templateRecheck
	return true
}

func (tp *template) release(now time.Time) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.open--
	if tp.open == 0 {
		tp.idleSince = now
	}
}

// sweep drops expired templates once the table has doubled since the last
// sweep.
func (r *templates) sweep(now time.Time) {
	if len(r.clients) < r.sweepAt {
		return
	}
	for c, tp := range r.clients {
		if !tp.alive(now) {
			delete(r.clients, c)
		}
	}
	r.sweepAt = max(minSweep, 2*len(r.clients))
}

// update forgets every template when affinity is turned off. Templates of
// endpoints that left stay, checked at use as IPVS checks them.
func (r *templates) update(cur *table) {
	if cur.affinity != 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.clients)
}
