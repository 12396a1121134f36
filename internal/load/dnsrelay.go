package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/load/cachedns"
	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc/resolver"
)

// relayBuilder builds grpc-go's own DNS resolver for a client with
// Config.Dial. grpc-go sends the queries of a dns://SERVER/NAME target to
// SERVER on sockets it opens itself, in this process's network namespace
// (internal/resolver/dns, v1.85: addressDialer, which no option
// replaces), so each resolver gets a relay (dnsRelay) as its SERVER, on
// 127.0.0.1, which carries every query on to the target's server through
// dial. The rest is grpc-go's resolver as it is: its schedule, its
// process-wide least interval between resolutions, its queries (A, AAAA,
// and TXT for a service config) and its timeouts.
type relayBuilder struct {
	dial cachedns.DialFunc
}

func (relayBuilder) Scheme() string { return cachedns.Scheme }

// Build starts a relay to target's DNS server and grpc-go's resolver on
// it; the resolver's Close stops both.
func (b relayBuilder) Build(target resolver.Target, cc resolver.ClientConn, opts resolver.BuildOptions) (resolver.Resolver, error) {
	grpcDNS := resolver.Get(cachedns.Scheme)
	if grpcDNS == nil {
		return nil, errors.New("load: grpc-go's dns resolver is not registered")
	}
	server := target.URL.Host
	if server == "" {
		return nil, fmt.Errorf("load: dns target %q names no DNS server", target.URL.String())
	}
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, "53")
	}
	relay, err := startRelay(server, b.dial)
	if err != nil {
		return nil, err
	}
	u := target.URL
	u.Host = relay.addr.String()
	r, err := grpcDNS.Build(resolver.Target{URL: u}, cc, opts)
	if err != nil {
		relay.close()
		return nil, err
	}
	return relayed{Resolver: r, relay: relay}, nil
}

// relayed is grpc-go's resolver with its relay.
type relayed struct {
	resolver.Resolver
	relay *dnsRelay
}

// Close stops the resolver, then its relay.
func (r relayed) Close() {
	r.Resolver.Close()
	r.relay.close()
}

// relayTimeout bounds one relayed exchange: a UDP query and its answer,
// or a TCP connection. grpc-go's resolver asks again on its own timeout
// (Go's resolver: 5 s per try).
const relayTimeout = 10 * time.Second

// dnsRelay carries DNS queries that arrive on addr (UDP and TCP, one port)
// to server, each on a socket of its own that dial opens: a UDP query and
// the one datagram that answers it, or a TCP connection, copied both ways.
// A query whose socket cannot be opened goes unanswered, as a lost
// packet. Its goroutines end with close.
type dnsRelay struct {
	addr   netip.AddrPort
	server string
	dial   cachedns.DialFunc
	pc     net.PacketConn
	ln     net.Listener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startRelay listens on a free port of 127.0.0.1 (UDP and TCP) and relays
// to server until close.
func startRelay(server string, dial cachedns.DialFunc) (*dnsRelay, error) {
	pc, ln, err := listenDNS(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		return nil, fmt.Errorf("load: dns relay: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &dnsRelay{addr: loopback.AddrPort(pc.LocalAddr()), server: server, dial: dial, pc: pc, ln: ln, ctx: ctx, cancel: cancel}
	r.wg.Add(2)
	go r.serveUDP()
	go r.serveTCP()
	return r, nil
}

// listenDNS opens a UDP socket on a free port of ip and a TCP listener on
// the same port, trying again when TCP has that port taken.
func listenDNS(ip netip.Addr) (net.PacketConn, net.Listener, error) {
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

// close stops relaying, cuts the exchanges in progress and waits for them.
func (r *dnsRelay) close() {
	r.cancel()
	r.pc.Close()
	r.ln.Close()
	r.wg.Wait()
}

// serveUDP relays each datagram on a goroutine of its own.
func (r *dnsRelay) serveUDP() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		q := bytes.Clone(buf[:n])
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.udp(q, from)
		}()
	}
}

// udp sends query q on to the server and its answer back to from.
func (r *dnsRelay) udp(q []byte, from net.Addr) {
	ctx, cancel := context.WithTimeout(r.ctx, relayTimeout)
	defer cancel()
	c, err := r.dial(ctx, "udp", r.server)
	if err != nil {
		return
	}
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	if _, err := c.Write(q); err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil {
		return
	}
	r.pc.WriteTo(buf[:n], from)
}

// serveTCP relays each connection on a goroutine of its own.
func (r *dnsRelay) serveTCP() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.tcp(c)
		}()
	}
}

// tcp copies between c and a connection to the server until both sides
// are done: the client's end half-closes the server's side, the server's
// end closes c.
func (r *dnsRelay) tcp(c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(r.ctx, relayTimeout)
	defer cancel()
	up, err := r.dial(ctx, "tcp", r.server)
	if err != nil {
		return
	}
	defer up.Close()
	defer context.AfterFunc(ctx, func() {
		c.Close()
		up.Close()
	})()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	io.Copy(c, up)
	c.Close()
	<-sent
}
