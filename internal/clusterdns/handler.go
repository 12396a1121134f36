package clusterdns

import (
	"net"
	"time"

	"github.com/miekg/dns"
)

// ServeDNS implements dns.Handler. It writes exactly one reply to every
// message it is given and never blocks on the API: answers come from the
// informer caches, through a memo of built answers that every API change
// they depend on invalidates before the informers show it. It is safe for
// concurrent use and needs no socket, so tests and fuzzers call it
// directly.
//
// Messages that are not a plain query get an error reply instead of an
// answer (the miekg/dns server already drops or rejects most of them
// before the handler runs):
//
//   - a response (QR set), zero or several questions: FORMERR;
//   - an opcode other than QUERY (NOTIFY, UPDATE, ...): NOTIMP;
//   - an EDNS version other than 0: BADVERS (RFC 6891);
//   - a class other than IN or ANY: REFUSED, as no other class is served;
//   - a name outside the zones served: REFUSED, since the server has no
//     upstream; the reverse zones are served unless Config.NoReverseZones;
//   - AXFR and IXFR: REFUSED, as in CoreDNS;
//   - anything in the zones before the informers have synced: SERVFAIL.
//
// Every answer from the zones has AA set; RA is never set.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	s.answer(w, r, &scratch{})
}

// listenerHandler is the handler Start gives the miekg servers. Their
// writers pack the reply inside WriteMsg and keep nothing, so the reply
// and its slices of shuffled records can go back to a pool once it
// returns. ServeDNS cannot know that of any writer and allocates them.
type listenerHandler struct{ s *Server }

func (h listenerHandler) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	sc := scratch{pool: true}
	h.s.answer(w, r, &sc)
	sc.release()
}

// answer answers r on w, taking record slices from sc.
func (s *Server) answer(w dns.ResponseWriter, r *dns.Msg, sc *scratch) {
	var start time.Time
	if s.cfg.queryLog != nil {
		start = time.Now()
	}
	tcp := isTCP(w)
	m := sc.msg()
	setReply(m, r)
	size := -1 // unknown
	if rcode := check(r); rcode != dns.RcodeSuccess {
		m.Rcode = rcode
	} else {
		size = s.reply(m, r, sc)
	}
	s.scrub(r, m, w.RemoteAddr(), tcp, size)
	if err := w.WriteMsg(m); err != nil {
		s.cfg.log.Debug("write reply", "err", err)
	}
	s.logQuery(start, w, r, m, tcp)
}

// reply fills m with the answer to r's question, through the cache plugin
// if Config.Cache is set, and returns the uncompressed length of m (an
// upper bound if names have escapes), or -1.
func (s *Server) reply(m, r *dns.Msg, sc *scratch) int {
	qs := r.Question[0]
	name := dns.Fqdn(qs.Name)
	if qs.Qtype == dns.TypeAXFR || qs.Qtype == dns.TypeIXFR {
		m.Rcode = dns.RcodeRefused
		return -1
	}
	build := func() (answerSet, bool) { return s.answerSet(name, qs.Qtype) }
	var set answerSet
	var ok bool
	if s.plugin == nil {
		set, ok = build()
	} else {
		q := question{name: name, qtype: qs.Qtype, qclass: qs.Qclass, cd: r.CheckingDisabled}
		if opt := r.IsEdns0(); opt != nil {
			q.do = opt.Do()
		}
		set, ok = s.plugin.through(q, build)
	}
	if !ok {
		m.Rcode = dns.RcodeRefused
		return -1
	}
	return s.fill(m, name, set, sc)
}

// answerSet answers a question about name (an FQDN) from the API objects
// through the answer memo: owners renamed to the case asked, the negative
// SOA when the answer is empty, SERVFAIL before the informers sync. ok is
// false if name is outside the zones served.
func (s *Server) answerSet(name string, qtype uint16) (set answerSet, ok bool) {
	if !s.store.hasSynced() {
		return s.notSynced(name, qtype)
	}
	e, ok := s.entryFor(name, qtype)
	if !ok {
		return answerSet{}, false
	}
	set = answerSet{
		rcode: e.rcode, answer: e.answer, extra: e.extra,
		answerTail: e.answerTail, extraTail: e.extraTail, wireLen: e.wireLen,
	}
	if name != e.owner {
		set.answer, set.owned = renamed(e.answer, e.owner, name), true
	}
	if len(set.answer) == 0 {
		soa, n := s.negativeSOA(name[len(name)-e.zoneLen:], e.kind)
		set.ns = []dns.RR{soa}
		set.wireLen += n
	}
	return set, true
}

// notSynced answers SERVFAIL for names in the zones served.
func (s *Server) notSynced(name string, qtype uint16) (answerSet, bool) {
	q, ok := s.locate(name, qtype)
	if !ok {
		return answerSet{}, false
	}
	soa := s.soa(q.zone)
	return answerSet{rcode: dns.RcodeServerFailure, ns: []dns.RR{soa}, wireLen: dns.Len(soa)}, true
}

// fill copies set into m for the name as asked, with the addresses
// shuffled unless Config.FixedOrder, and returns m's uncompressed length.
func (s *Server) fill(m *dns.Msg, name string, set answerSet, sc *scratch) int {
	m.Rcode = set.rcode
	m.Authoritative = true
	answer, extra := set.answer, set.extra
	if !s.cfg.fixedOrder {
		answer = s.shuffled(answer, set.answerTail, set.owned, sc)
		extra = s.shuffled(extra, set.extraTail, false, sc)
	}
	m.Answer, m.Ns, m.Extra = answer, set.ns, extra
	return headerLen + len(name) + 1 + questionFixedLen + set.wireLen
}

// shuffled returns rrs with the addresses from tail on in random order,
// copying the slice unless owned (already a copy). Fewer than two
// addresses stay as they are.
func (s *Server) shuffled(rrs []dns.RR, tail int, owned bool, sc *scratch) []dns.RR {
	switch {
	case len(rrs)-tail < 2:
		return rrs
	case owned:
		s.shuffleInPlace(rrs, tail)
		return rrs
	}
	out := sc.slice(len(rrs))
	s.shuffleInto(out, rrs, tail)
	return out
}

// Fixed sizes in the DNS wire format: the header, a question's type and
// class, and an OPT record without options.
const (
	headerLen        = 12
	questionFixedLen = 4
	optLen           = 11
)

// compressAbove is the number of records above which a reply is always
// compressed: below it, building the compression map costs more than
// copying whole names.
const compressAbove = 16

// UDP replies longer than this (by client address family) are compressed
// even when they fit, to avoid IP fragmentation (CoreDNS request.Scrub,
// limits from NSD).
const (
	fragmentLimitV4 = 1480
	fragmentLimitV6 = 1220
)

// setReply makes m a reply to r as dns.Msg.SetReply does, reusing the
// array of m's question section.
func setReply(m, r *dns.Msg) {
	m.Id = r.Id
	m.Response = true
	m.Opcode = r.Opcode
	if m.Opcode == dns.OpcodeQuery {
		m.RecursionDesired = r.RecursionDesired
		m.CheckingDisabled = r.CheckingDisabled
	}
	m.Rcode = dns.RcodeSuccess
	if len(r.Question) > 0 {
		m.Question = append(m.Question[:0], r.Question[0])
	}
}

// check returns the error RCODE for a message that is not a query this
// server can answer, or RcodeSuccess.
func check(r *dns.Msg) int {
	switch {
	case r.Response || len(r.Question) != 1:
		return dns.RcodeFormatError
	case r.Opcode != dns.OpcodeQuery:
		return dns.RcodeNotImplemented
	}
	if opt := r.IsEdns0(); opt != nil && opt.Version() != 0 {
		return dns.RcodeBadVers
	}
	if c := r.Question[0].Qclass; c != dns.ClassINET && c != dns.ClassANY {
		return dns.RcodeRefused
	}
	return dns.RcodeSuccess
}

// scrub makes m fit the client, as CoreDNS's request.ScrubWriter does: echo
// an OPT record if the query had one, and truncate to the client's EDNS0
// UDP size (at least 512), 512 without EDNS0, or 65535 over TCP, keeping
// whole RRs and setting TC if any was dropped. A reply that fits is sent
// uncompressed, as CoreDNS sends it, unless it goes over UDP and is longer
// than the fragmentation limit, or has more than compressAbove records:
// compression is invisible to clients and packs many records in half the
// time. size is m's uncompressed length (see reply), or -1.
func (s *Server) scrub(r, m *dns.Msg, client net.Addr, tcp bool, size int) {
	if size < 0 {
		size = m.Len()
	}
	limit := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		limit = max(int(opt.UDPSize()), dns.MinMsgSize)
		m.Extra = append(m.Extra, replyOPT(opt, limit))
		size += optLen
	}
	if tcp {
		limit = dns.MaxMsgSize
	}
	m.Compress = false
	if size > limit {
		m.Truncate(limit) // measures exactly; compresses if it must
	}
	if !m.Compress {
		m.Compress = len(m.Answer)+len(m.Ns)+len(m.Extra) > compressAbove ||
			!tcp && fragments(m, size, client)
	}
}

// fragments reports whether an uncompressed UDP reply of about size bytes
// is over the fragmentation limit for the client's address family.
func fragments(m *dns.Msg, size int, client net.Addr) bool {
	if size <= fragmentLimitV6 {
		return false
	}
	size = m.Len()
	if isIPv4(client) {
		return size > fragmentLimitV4
	}
	return size > fragmentLimitV6
}

func isIPv4(a net.Addr) bool {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.IP.To4() != nil
	case *net.TCPAddr:
		return a.IP.To4() != nil
	}
	return false
}

// replyOPT is the OPT record of a reply to a query carrying q: version 0,
// the client's UDP size (at least 512), the DO bit echoed, no options.
func replyOPT(q *dns.OPT, size int) *dns.OPT {
	o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	o.SetUDPSize(uint16(size))
	if q.Do() {
		o.SetDo()
	}
	return o
}

func isTCP(w dns.ResponseWriter) bool {
	_, ok := w.RemoteAddr().(*net.TCPAddr)
	return ok
}

func (s *Server) logQuery(start time.Time, w dns.ResponseWriter, r, m *dns.Msg, tcp bool) {
	if s.cfg.queryLog == nil {
		return
	}
	ev := QueryEvent{
		Time:      start,
		Client:    w.RemoteAddr(),
		Network:   "udp",
		Rcode:     m.Rcode,
		Answers:   len(m.Answer),
		Truncated: m.Truncated,
	}
	if tcp {
		ev.Network = "tcp"
	}
	if len(r.Question) > 0 {
		ev.Name, ev.Type = r.Question[0].Name, r.Question[0].Qtype
	}
	s.cfg.queryLog(ev)
}
