package clusterdns_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// FuzzServeDNS feeds arbitrary bytes: whatever unpacks must get exactly one
// reply, over UDP and TCP, that packs and unpacks again.
func FuzzServeDNS(f *testing.F) {
	fx := newFixture(f, clusterdns.Config{}, referenceObjects()...)
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
		for _, tcp := range []bool{false, true} {
			w := newRecorder(tcp)
			fx.srv.ServeDNS(w, m)
			if w.err != nil || w.writes != 1 {
				t.Fatalf("tcp=%v: %d writes, err %v, query:\n%v", tcp, w.writes, w.err, m)
			}
		}
	})
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
		q("SvC1.TeStNs.SvC.cLuStEr.LoCaL.", dns.TypeANY, 512),
	}
}
