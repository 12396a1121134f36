package clusterdns_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// TestMessageChecks feeds messages that are not plain queries.
func TestMessageChecks(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	query := func(edit func(m *dns.Msg)) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(tn("svc1"), dns.TypeA)
		edit(m)
		return m
	}
	tests := []struct {
		name      string
		msg       *dns.Msg
		rcode     int
		questions int
	}{
		{"no question", query(func(m *dns.Msg) { m.Question = nil }), dns.RcodeFormatError, 0},
		{"two questions", query(func(m *dns.Msg) {
			m.Question = append(m.Question, dns.Question{Name: tn("svc2"), Qtype: dns.TypeA, Qclass: dns.ClassINET})
		}), dns.RcodeFormatError, 1},
		{"a response", query(func(m *dns.Msg) { m.Response = true }), dns.RcodeFormatError, 1},
		{"NOTIFY", query(func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), dns.RcodeNotImplemented, 1},
		{"UPDATE", query(func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate }), dns.RcodeNotImplemented, 1},
		{"CHAOS class", query(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }), dns.RcodeRefused, 1},
		{"ANY class", query(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassANY }), dns.RcodeSuccess, 1},
		{"EDNS version 1", query(func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			m.IsEdns0().SetVersion(1)
		}), dns.RcodeBadVers, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := exchange(t, fx.srv, tt.msg, false)
			if got.Rcode != tt.rcode || len(got.Question) != tt.questions || got.Id != tt.msg.Id || !got.Response {
				t.Errorf("got rcode %s, %d questions, id %d, qr=%v; want %s, %d, %d, true",
					dns.RcodeToString[got.Rcode], len(got.Question), got.Id, got.Response,
					dns.RcodeToString[tt.rcode], tt.questions, tt.msg.Id)
			}
		})
	}
}

// TestNotSynced: before the informers have listed, every question in the
// zones served gets SERVFAIL, never a false NXDOMAIN, and nothing of it is
// memoized.
func TestNotSynced(t *testing.T) {
	srv, err := clusterdns.New(newFactory(), clusterdns.Config{Pods: clusterdns.PodsVerified})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{tn("svc1"), tn("svc0"), "cluster.local.", "1.0.0.10.in-addr.arpa.",
		"10-240-0-1.testns.pod.cluster.local."} {
		m := new(dns.Msg)
		m.SetQuestion(q, dns.TypeA)
		got := exchange(t, srv, m, false)
		if got.Rcode != dns.RcodeServerFailure || len(got.Answer) != 0 || !got.Authoritative || len(got.Ns) != 1 {
			t.Errorf("%s: %s, want SERVFAIL with the SOA and no answer", q, describe(got))
		}
	}
	if n := clusterdns.MemoizedNames(srv); n != 0 {
		t.Errorf("%d names memoized before sync", n)
	}
	m := new(dns.Msg)
	m.SetQuestion("example.com.", dns.TypeA)
	if got := exchange(t, srv, m, false); got.Rcode != dns.RcodeRefused {
		t.Errorf("out of zone: %s, want REFUSED", describe(got))
	}
}

// TestEDNSEcho: the reply carries an OPT only if the query had one, with
// the DO bit echoed.
func TestEDNSEcho(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	tests := []struct {
		name    string
		edns    bool
		do      bool
		wantOPT bool
	}{
		{"no EDNS", false, false, false},
		{"EDNS", true, false, true},
		{"EDNS with DO", true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tn("svc1"), dns.TypeA)
			if tt.edns {
				m.SetEdns0(1232, tt.do)
			}
			got := exchange(t, fx.srv, m, false)
			opt := got.IsEdns0()
			if (opt != nil) != tt.wantOPT {
				t.Fatalf("OPT present = %v, want %v", opt != nil, tt.wantOPT)
			}
			if opt != nil && (opt.Do() != tt.do || opt.Version() != 0) {
				t.Errorf("OPT do=%v version=%d, want do=%v version=0", opt.Do(), opt.Version(), tt.do)
			}
		})
	}
}

// TestQueryLog: the hook sees each reply once, as sent.
func TestQueryLog(t *testing.T) {
	var events []clusterdns.QueryEvent
	fx := newFixture(t, clusterdns.Config{QueryLog: func(ev clusterdns.QueryEvent) { events = append(events, ev) }},
		referenceObjects()...)
	fx.ask(t, tn("hdls"), dns.TypeA, true, 0)
	fx.ask(t, tn("big"), dns.TypeA, false, 0)
	fx.ask(t, tn("svc0"), dns.TypeTXT, false, 0)
	type summary struct {
		Network, Name string
		Type          uint16
		Rcode         int
		Answers       int
		Truncated     bool
		HasClient     bool
	}
	var got []summary
	for _, ev := range events {
		got = append(got, summary{ev.Network, ev.Name, ev.Type, ev.Rcode, ev.Answers, ev.Truncated, ev.Client != nil && !ev.Time.IsZero()})
	}
	want := []summary{
		{"tcp", tn("hdls"), dns.TypeA, dns.RcodeSuccess, 3, false, true},
		{"udp", tn("big"), dns.TypeA, dns.RcodeSuccess, 29, true, true},
		{"udp", tn("svc0"), dns.TypeTXT, dns.RcodeNameError, 0, false, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
}

// TestOddNames: question names with non-ASCII letters (which ServeDNS may
// get from a caller, not off the wire) or escapes get one well-formed reply.
func TestOddNames(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, referenceObjects()...)
	tests := []struct {
		name  string
		qname string
		rcode int
	}{
		{"non-ASCII capital", "İ.testns.svc.cluster.local.", dns.RcodeNameError},
		{"non-ASCII capital in the zone", "svc1.testns.svc.cluster.İocal.", dns.RcodeRefused},
		{"escaped dot", `svc1\.testns.svc.cluster.local.`, dns.RcodeNameError},
		{"escaped byte", `svc1\255.testns.svc.cluster.local.`, dns.RcodeNameError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, h := range []dns.Handler{fx.srv, clusterdns.ListenerHandler(fx.srv)} {
				m := new(dns.Msg)
				m.SetQuestion(tt.qname, dns.TypeA)
				w := newRecorder(false)
				h.ServeDNS(w, m)
				if w.err != nil || w.writes != 1 {
					t.Fatalf("%d writes, err %v", w.writes, w.err)
				}
				if w.msg.Rcode != tt.rcode {
					t.Errorf("rcode %s, want %s", dns.RcodeToString[w.msg.Rcode], dns.RcodeToString[tt.rcode])
				}
			}
		})
	}
}
