package clusterdns_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// FuzzServeDNS feeds arbitrary bytes: whatever unpacks must get exactly one
// well-formed reply, over UDP and TCP, through ServeDNS and the listeners'
// handler: it packs and unpacks again, answers the query's ID with QR set,
// echoes a single question, fits the client's size, and is consistent
// (an error or NXDOMAIN has no answers; a negative in-zone answer carries
// one SOA; TC only over UDP).
func FuzzServeDNS(f *testing.F) {
	fx := newFixture(f, clusterdns.Config{Pods: clusterdns.PodsVerified},
		append(append(referenceObjects(), reverseObjects()...), podObjects()...)...)
	handlers := []dns.Handler{fx.srv, clusterdns.ListenerHandler(fx.srv)}
	for _, seed := range fuzzSeeds() {
		b, err := seed.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(data); err != nil {
			return
		}
		for _, h := range handlers {
			for _, tcp := range []bool{false, true} {
				w := newRecorder(tcp)
				h.ServeDNS(w, m)
				if w.err != nil || w.writes != 1 {
					t.Fatalf("tcp=%v: %d writes, err %v, query:\n%v", tcp, w.writes, w.err, m)
				}
				if msg := wellFormed(m, w.msg, w.size, tcp); msg != "" {
					t.Fatalf("tcp=%v: %s\nquery:\n%v\nreply:\n%v", tcp, msg, m, w.msg)
				}
			}
		}
	})
}

// wellFormed returns what is wrong with reply r (packed in size bytes) to
// query q, or "".
func wellFormed(q, r *dns.Msg, size int, tcp bool) string {
	limit := dns.MinMsgSize
	if opt := q.IsEdns0(); opt != nil {
		limit = max(limit, int(opt.UDPSize()))
	}
	if tcp {
		limit = dns.MaxMsgSize
	}
	switch {
	case r.Id != q.Id || !r.Response || r.Opcode != q.Opcode:
		return "header does not answer the query"
	case len(r.Question) > 1 || len(q.Question) > 0 && (len(r.Question) != 1 || r.Question[0] != q.Question[0]):
		return "question not echoed"
	case size > limit:
		return "reply larger than the client takes"
	case tcp && r.Truncated:
		return "TC over TCP"
	case r.RecursionAvailable:
		return "RA set"
	case r.Rcode != dns.RcodeSuccess && len(r.Answer) > 0:
		return "answers with an error RCODE"
	}
	if r.Authoritative && len(r.Answer) == 0 && !r.Truncated {
		if len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
			return "negative answer without one SOA"
		}
	}
	if (q.IsEdns0() != nil) != (r.IsEdns0() != nil) && r.Rcode != dns.RcodeFormatError {
		return "OPT not echoed"
	}
	return ""
}

func fuzzSeeds() []*dns.Msg {
	q := func(name string, qtype uint16, edns uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		if edns != 0 {
			m.SetEdns0(edns, true)
		}
		return m
	}
	return []*dns.Msg{
		q(tn("svc1"), dns.TypeA, 0),
		q(tn("big"), dns.TypeA, 1232),
		q("_http._tcp."+tn("hdls"), dns.TypeSRV, 0),
		q(tn("ext2svc"), dns.TypeAAAA, 4096),
		q("_grpc_config."+tn("svc1"), dns.TypeTXT, 0),
		q("cluster.local.", dns.TypeNS, 0),
		q("1.0.0.10.in-addr.arpa.", dns.TypePTR, 0),
		q("99.0.0.10.in-addr.arpa.", dns.TypePTR, 512),
		q(nibbles("5678:abcd::1"), dns.TypePTR, 0),
		q("0.0.10.in-addr.arpa.", dns.TypeA, 0),
		q("10-240-0-1.testns.pod.cluster.local.", dns.TypeA, 0),
		q("fd00--2.testns.pod.cluster.local.", dns.TypeAAAA, 0),
		q("SvC1.TeStNs.SvC.cLuStEr.LoCaL.", dns.TypeANY, 512),
		q("_HTTP._TCP.HDLS.TESTNS.SVC.CLUSTER.LOCAL.", dns.TypeSRV, 0),
	}
}
