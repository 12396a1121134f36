// Package dnstest runs a small DNS server on loopback for tests of DNS
// clients: it answers A queries from a table the test sets and changes,
// optionally turning each answer list round-robin, and counts the queries
// it saw. It stands in for the lab's cluster DNS.
package dnstest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/pinlab/pinlab/internal/loopback"
)

// Server is a running test DNS server over UDP and TCP on one loopback
// address. Its methods are safe for concurrent use.
type Server struct {
	addr   netip.AddrPort
	rotate bool

	mu      sync.Mutex
	answers map[string][]netip.Addr // by FQDN, lower case
	queries map[string]int
	sources map[netip.Addr]bool
	srvs    []*dns.Server
}

// Options says where a Server listens and how it answers. The zero value
// is what Start uses.
type Options struct {
	// IP is the address to listen on, in 127.0.0.0/8; the zero Addr means
	// 127.0.0.1.
	IP netip.Addr
	// Rotate turns a name's answer list by one more on each A query for
	// it, as a round-robin DNS server does: the n-th query's answer starts
	// at address n (mod the list's length), so the first starts at the
	// second. False answers in the order Set gave.
	Rotate bool
}

// Start serves on 127.0.0.1 with a port the kernel picks, over UDP and TCP
// (the same port), and shuts down when the test ends. Names not Set get
// NXDOMAIN; names Set to no addresses get NOERROR with an empty answer.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start as o says.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	ip := o.IP
	if !ip.IsValid() {
		ip = netip.MustParseAddr("127.0.0.1")
	}
	s := &Server{rotate: o.Rotate, answers: map[string][]netip.Addr{}, queries: map[string]int{}, sources: map[netip.Addr]bool{}}
	pc, ln, err := listen(ip)
	if err != nil {
		t.Fatalf("dnstest: %v", err)
	}
	s.addr = loopback.AddrPort(pc.LocalAddr())
	udp := &dns.Server{PacketConn: pc, Handler: s}
	tcp := &dns.Server{Listener: ln, Handler: s}
	s.srvs = []*dns.Server{udp, tcp}
	var wg sync.WaitGroup
	for _, srv := range s.srvs {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.ActivateAndServe()
		}()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("dnstest: server did not start")
		}
	}
	t.Cleanup(func() {
		for _, srv := range s.srvs {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.ShutdownContext(ctx)
			cancel()
		}
		wg.Wait()
	})
	return s
}

// listen opens a UDP socket on a free port of ip and a TCP listener on the
// same port, trying again when TCP has that port taken.
func listen(ip netip.Addr) (net.PacketConn, net.Listener, error) {
	var err error
	for range 20 {
		var pc net.PacketConn
		pc, err = loopback.ListenPacket(context.Background(), netip.AddrPortFrom(ip, 0).String())
		if err != nil {
			return nil, nil, err
		}
		var ln net.Listener
		ln, err = loopback.Listen(context.Background(), pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, err
}

// Addr is the server's address, for a target like "dns://<Addr>/name:port".
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Set makes name (with or without the final dot) answer with addrs, each an
// A record with TTL 5 s; no addrs means an empty NOERROR answer. UDP answers
// are truncated to 512 bytes (or the query's EDNS0 size) with TC set, so
// clients must retry over TCP for long lists, as with real servers.
func (s *Server) Set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[fqdn(name)] = append([]netip.Addr{}, addrs...)
}

// Delete makes name answer NXDOMAIN.
func (s *Server) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.answers, fqdn(name))
}

// Queries is how many A queries for name the server has answered.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[fqdn(name)]
}

// Sources lists the IPs queries came from, in no order.
func (s *Server) Sources() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ips []netip.Addr
	for ip := range s.sources {
		ips = append(ips, ip)
	}
	return ips
}

// ServeDNS answers one query; it implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	s.mu.Lock()
	addrs, ok := s.answers[name]
	if q.Qtype == dns.TypeA {
		s.queries[name]++
		if s.rotate && len(addrs) > 0 {
			n := s.queries[name] % len(addrs)
			addrs = append(addrs[n:len(addrs):len(addrs)], addrs[:n]...)
		}
	}
	s.sources[loopback.AddrPort(w.RemoteAddr()).Addr()] = true
	s.mu.Unlock()
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		for _, a := range addrs {
			hdr := dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		}
	}
	if w.LocalAddr().Network() == "udp" {
		limit := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			limit = max(int(opt.UDPSize()), dns.MinMsgSize)
		}
		m.Truncate(limit)
	}
	w.WriteMsg(m)
}

func fqdn(name string) string { return strings.ToLower(dns.Fqdn(name)) }
