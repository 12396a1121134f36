package clusterdns

import (
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

// The answer memo keeps each answer built from the informer caches until
// an API change it depends on makes it outdated, so that a repeated query
// costs a lookup instead of a rebuild. It is an implementation detail for
// speed: a memoized answer is never older than the informer caches, and
// replies are the same with or without it. CoreDNS's cache plugin, which
// does serve answers older than the API objects, is emulated apart
// (Config.Cache, cacheplugin.go).

// maxMemoized bounds the names in the answer memo. When it is full the next
// new name clears it, so a flood of made-up names costs rebuilding, never
// memory.
const maxMemoized = 1 << 14

// entry is the answer to one question about a name, built from the
// informer caches. Its records are shared by every reply made from it and
// are never modified; slices have no spare capacity, so an append copies.
type entry struct {
	owner   string // the name asked, lower case unless built for one reply
	qtype   uint16
	rcode   int
	answer  []dns.RR
	extra   []dns.RR
	kind    zoneKind
	zoneLen int // length of the zone at the end of owner
	wireLen int // uncompressed wire length of answer and extra

	// answer and extra are in loadbalance order (see shuffle.go); the
	// address records start at these indexes.
	answerTail, extraTail int

	// renamable: the only records naming the query are in answer and are
	// owned by it, so a reply to the same name in other case renames
	// their owners. SRV targets, NS names and glue take the zone as the
	// query spells it, so those answers are rebuilt instead.
	renamable bool

	// What the answer depends on (see changes.current).
	seq   uint64
	scope scope
	svc   *atomic.Uint64
}

// answerMemo maps names, as asked in lower case, to their answers by
// question type. Reads take no lock: the query path does one sync.Map
// lookup keyed by the name string and scans a few types.
type answerMemo struct {
	names sync.Map     // string → *nameAnswers
	count atomic.Int64 // names stored, roughly
}

// nameAnswers holds the answers for one name, at most one per type.
type nameAnswers struct {
	mu    sync.Mutex               // serialises writers
	types atomic.Pointer[[]*entry] // replaced, never modified
}

func (c *answerMemo) get(name string, qtype uint16) *entry {
	v, ok := c.names.Load(name)
	if !ok {
		return nil
	}
	if es := v.(*nameAnswers).types.Load(); es != nil {
		for _, e := range *es {
			if e.qtype == qtype {
				return e
			}
		}
	}
	return nil
}

// put stores e for the lower-case name unless a newer entry of its type is
// there already.
func (c *answerMemo) put(name string, e *entry) {
	v, ok := c.names.Load(name)
	if !ok {
		if c.count.Add(1) > maxMemoized {
			c.names.Clear()
			c.count.Store(1)
		}
		v, _ = c.names.LoadOrStore(name, new(nameAnswers))
	}
	na := v.(*nameAnswers)
	na.mu.Lock()
	defer na.mu.Unlock()
	var old []*entry
	if p := na.types.Load(); p != nil {
		old = *p
	}
	es := make([]*entry, 0, len(old)+1)
	for _, o := range old {
		switch {
		case o.qtype != e.qtype:
			es = append(es, o)
		case o.seq > e.seq:
			return
		}
	}
	es = append(es, e)
	na.types.Store(&es)
}

// memoizable reports whether answers to qtype are kept. SOA answers carry
// the serial of the moment; AXFR and IXFR are refused.
func memoizable(qtype uint16) bool {
	switch qtype {
	case dns.TypeSOA, dns.TypeAXFR, dns.TypeIXFR:
		return false
	}
	return true
}

// entryFor returns the answer to a question about name (an FQDN) in a zone
// served, from the memo when it is current. ok is false if name is
// outside the zones served.
func (s *Server) entryFor(name string, qtype uint16) (e *entry, ok bool) {
	changes := s.store.changes
	if e = s.memo.get(name, qtype); e != nil && changes.current(e.seq, e.scope, e.svc) {
		return e, true // name is in lower case: entries are stored so
	}
	key := lowerASCII(name)
	if key != name {
		if e = s.memo.get(key, qtype); e != nil && changes.current(e.seq, e.scope, e.svc) {
			return s.forName(e, name)
		}
	}
	seq := changes.seq.Load() // before reading any lister
	q, ok := s.locate(key, qtype)
	if !ok {
		return nil, false
	}
	e = s.build(q, seq)
	if memoizable(qtype) {
		s.memo.put(key, e)
	}
	return s.forName(e, name)
}

// forName adapts e, built for the lower-case name, to name as asked.
func (s *Server) forName(e *entry, name string) (*entry, bool) {
	if name == e.owner || e.renamable {
		return e, true
	}
	q, ok := s.locate(name, e.qtype)
	if !ok {
		return nil, false
	}
	return s.build(q, 0), true
}

// build answers q and describes the answer for the memo.
func (s *Server) build(q query, seq uint64) *entry {
	rcode, answer, extra := s.resolve(q)
	e := &entry{
		owner:   q.owner,
		qtype:   q.qtype,
		rcode:   rcode,
		answer:  clip(answer),
		extra:   clip(extra),
		kind:    q.kind,
		zoneLen: len(q.zone),
		seq:     seq,
	}
	e.wireLen = wireLen(e.answer) + wireLen(e.extra)
	e.answerTail = loadbalanceOrder(e.answer)
	e.extraTail = loadbalanceOrder(e.extra)
	e.renamable = len(e.extra) == 0 && allRenamable(e.answer)
	e.scope, e.svc = s.scopeOf(q)
	return e
}

// scopeOf tells what the answer to q depends on: one Service for names
// below <svc>.<ns>.svc.<zone> (unless it is an ExternalName, whose target
// may be any name), Namespaces and Pods for the pod subtree, Namespaces
// for a namespace, and anything otherwise.
func (s *Server) scopeOf(q query) (scope, *atomic.Uint64) {
	if q.kind != clusterZone {
		return scopeAll, nil
	}
	r, err := parseRequest(q.labels)
	switch {
	case err != nil || r.namespace == "":
		return scopeAll, nil
	case r.subtree == podLabel:
		return scopePods, nil
	case r.service == "":
		return scopeNamespaces, nil
	}
	if svc := s.store.service(r.namespace, r.service); svc != nil && svc.Spec.Type == corev1.ServiceTypeExternalName {
		return scopeAll, nil
	}
	ctr := s.store.changes.service(r.namespace + "/" + r.service)
	if ctr == nil {
		return scopeAll, nil
	}
	return scopeService, ctr
}

func clip(rrs []dns.RR) []dns.RR { return rrs[:len(rrs):len(rrs)] }

func wireLen(rrs []dns.RR) int {
	n := 0
	for _, rr := range rrs {
		n += dns.Len(rr)
	}
	return n
}

func allRenamable(rrs []dns.RR) bool {
	for _, rr := range rrs {
		switch rr.Header().Rrtype {
		case dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypePTR, dns.TypeTXT:
		default:
			return false
		}
	}
	return true
}

// renamed returns rrs with the owner from replaced by to, copying the
// records it changes.
func renamed(rrs []dns.RR, from, to string) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		if rr.Header().Name == from {
			rr = dns.Copy(rr)
			rr.Header().Name = to
		}
		out[i] = rr
	}
	return out
}
