package coredns

import (
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	tap "github.com/dnstap/golang-dnstap"
	framestream "github.com/farsightsec/golang-framestream"
	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// response builds a dnstap message as CoreDNS's dnstap plugin sends it
// with "full": the reply to name/qtype with n A records, from client.
func response(t *testing.T, typ tap.Message_Type, name string, n int, rcode int, client net.Addr, raw bool) []byte {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	r := new(dns.Msg)
	r.SetRcode(q, rcode)
	for i := range n {
		r.Answer = append(r.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
			A: net.IPv4(10, 244, 0, byte(2+i))})
	}
	r.Truncated = n > 2
	wire, err := r.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m := &tap.Message{Type: &typ}
	sec, nsec := uint64(1764650000), uint32(5000)
	m.QueryTimeSec, m.QueryTimeNsec = &sec, &nsec
	proto := tap.SocketProtocol_UDP
	var ip net.IP
	var port int
	switch a := client.(type) {
	case *net.UDPAddr:
		ip, port = a.IP.To4(), a.Port
	case *net.TCPAddr:
		ip, port, proto = a.IP.To4(), a.Port, tap.SocketProtocol_TCP
	}
	p := uint32(port)
	m.SocketProtocol, m.QueryAddress, m.QueryPort = &proto, ip, &p
	if raw {
		if typ == tap.Message_CLIENT_RESPONSE {
			m.ResponseMessage = wire
		} else {
			m.QueryMessage = wire
		}
	}
	return marshal(t, m)
}

func marshal(t *testing.T, m *tap.Message) []byte {
	t.Helper()
	typ := tap.Dnstap_MESSAGE
	b, err := proto.Marshal(&tap.Dnstap{Type: &typ, Message: m})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQueryEvent: a CLIENT_RESPONSE becomes the event pinlab's DNS gives
// for the same answer; other messages are skipped, and a response without
// its wire message is an error.
func TestQueryEvent(t *testing.T) {
	udp := &net.UDPAddr{IP: net.IPv4(10, 244, 254, 1), Port: 40001}
	tcp := &net.TCPAddr{IP: net.IPv4(10, 244, 0, 9), Port: 40002}
	at := time.Unix(1764650000, 5000)
	for _, tt := range []struct {
		name    string
		frame   []byte
		want    clusterdns.QueryEvent
		ok, err bool
	}{
		{"udp, two answers", response(t, tap.Message_CLIENT_RESPONSE, "web.shop.svc.cluster.local.", 2, dns.RcodeSuccess, udp, true),
			clusterdns.QueryEvent{Time: at, Client: udp, Network: "udp", Name: "web.shop.svc.cluster.local.", Type: dns.TypeA, Answers: 2}, true, false},
		{"tcp, truncated", response(t, tap.Message_CLIENT_RESPONSE, "Web.shop.svc.cluster.local.", 3, dns.RcodeSuccess, tcp, true),
			clusterdns.QueryEvent{Time: at, Client: tcp, Network: "tcp", Name: "Web.shop.svc.cluster.local.", Type: dns.TypeA, Answers: 3, Truncated: true}, true, false},
		{"nxdomain", response(t, tap.Message_CLIENT_RESPONSE, "nope.shop.svc.cluster.local.", 0, dns.RcodeNameError, udp, true),
			clusterdns.QueryEvent{Time: at, Client: udp, Network: "udp", Name: "nope.shop.svc.cluster.local.", Type: dns.TypeA, Rcode: dns.RcodeNameError}, true, false},
		{"a query", response(t, tap.Message_CLIENT_QUERY, "web.shop.svc.cluster.local.", 0, 0, udp, true), clusterdns.QueryEvent{}, false, false},
		{"no wire message", response(t, tap.Message_CLIENT_RESPONSE, "web.shop.svc.cluster.local.", 1, 0, udp, false), clusterdns.QueryEvent{}, false, true},
		{"not protobuf", []byte{0xff, 0xff, 0xff}, clusterdns.QueryEvent{}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := queryEvent(tt.frame)
			if (err != nil) != tt.err || ok != tt.ok {
				t.Fatalf("queryEvent: ok %v, error %v; want ok %v, error %v", ok, err, tt.ok, tt.err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b net.Addr) bool {
				return a == nil && b == nil || a != nil && b != nil && a.String() == b.String() && a.Network() == b.Network()
			})); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTapReader writes frames to the reader's socket as CoreDNS's dnstap
// plugin does (a bidirectional Frame Streams encoder): the answers to the
// lab's own queries (Start's probes, the markers) are dropped, the rest
// reaches the log in order, and close returns once the writer has gone.
func TestTapReader(t *testing.T) {
	var mu sync.Mutex
	var got []string
	r, err := listenTap(filepath.Join(t.TempDir(), "dnstap.sock"), func(ev clusterdns.QueryEvent) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev.Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", r.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	enc, err := framestream.NewEncoder(c, &framestream.EncoderOptions{ContentType: []byte("protobuf:dnstap.Dnstap"), Bidirectional: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	client := &net.UDPAddr{IP: net.IPv4(10, 244, 254, 1), Port: 40001}
	for _, name := range []string{"ready." + markerZone, "a.shop.svc.cluster.local.", "SYNC-1." + markerZone, "cluster.local.", "b.shop.svc.cluster.local."} {
		if _, err := enc.Write(response(t, tap.Message_CLIENT_RESPONSE, name, 1, 0, client, true)); err != nil {
			t.Fatal(err)
		}
		if _, err := enc.Write(response(t, tap.Message_CLIENT_QUERY, name, 0, 0, client, true)); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := r.close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	want := []string{"a.shop.svc.cluster.local.", "cluster.local.", "b.shop.svc.cluster.local."}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("logged names (-want +got):\n%s", diff)
	}
}
