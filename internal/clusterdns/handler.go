package clusterdns

import (
	"net"
	"time"

	"github.com/miekg/dns"
)

// ServeDNS implements dns.Handler. It writes exactly one reply to every
// message it is given and never blocks on the API: answers come from the
// informer caches. It is safe for concurrent use and needs no socket, so
// tests and fuzzers call it directly.
//
// Messages that are not a plain query get an error reply instead of an
// answer (the miekg/dns server already drops or rejects most of them
// before the handler runs):
//
//   - a response (QR set), zero or several questions: FORMERR;
//   - an opcode other than QUERY (NOTIFY, UPDATE, ...): NOTIMP;
//   - an EDNS version other than 0: BADVERS (RFC 6891);
//   - a class other than IN or ANY: REFUSED, as no other class is served;
//   - a name outside the zone (reverse zones included): REFUSED, since the
//     server is authoritative only for its zone and has no upstream;
//   - AXFR and IXFR: REFUSED, as in CoreDNS;
//   - anything in the zone before the informers have synced: SERVFAIL.
//
// Every answer from the zone has AA set; RA is never set.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	m := s.reply(r)
	tcp := isTCP(w)
	s.scrub(r, m, tcp)
	if err := w.WriteMsg(m); err != nil {
		s.cfg.log.Debug("write reply", "err", err)
	}
	s.logQuery(start, w, r, m, tcp)
}

// reply builds the full (untruncated) reply to r.
func (s *Server) reply(r *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	if rcode := check(r); rcode != dns.RcodeSuccess {
		m.Rcode = rcode
		return m
	}
	qs := r.Question[0]
	q, ok := s.inZone(dns.Fqdn(qs.Name), qs.Qtype)
	switch {
	case !ok || qs.Qtype == dns.TypeAXFR || qs.Qtype == dns.TypeIXFR:
		m.Rcode = dns.RcodeRefused
		return m
	case !s.store.hasSynced():
		m.Rcode = dns.RcodeServerFailure
	default:
		m.Rcode, m.Answer, m.Extra = s.resolve(q)
	}
	m.Authoritative = true
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{s.soa(q.zone)}
	}
	return m
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

// scrub makes m fit the client, as CoreDNS's request.ScrubWriter does:
// shuffle addresses (unless FixedOrder), echo an OPT record if the query
// had one, and truncate to the client's EDNS0 UDP size (at least 512), 512
// without EDNS0, or 65535 over TCP, keeping whole RRs and setting TC if any
// was dropped.
func (s *Server) scrub(r, m *dns.Msg, tcp bool) {
	if !s.cfg.fixedOrder && m.Rcode == dns.RcodeSuccess {
		s.shuffle(m.Answer)
		s.shuffle(m.Extra)
	}
	size := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		size = max(int(opt.UDPSize()), dns.MinMsgSize)
		m.Extra = append(m.Extra, replyOPT(opt, size))
	}
	if tcp {
		size = dns.MaxMsgSize
	}
	m.Truncate(size)
	m.Compress = true
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
