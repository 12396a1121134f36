package evidence

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Sample is one reading of a gRPC server's counters.
type Sample struct {
	// At is when the reading was taken.
	At time.Time
	// Calls are the server's totals since it started.
	Calls Calls
	// Sockets are its open client connections by channelz socket ID, the
	// sampler's own left out.
	Sockets map[int64]Socket
	// Own counts the calls started on the sampler's own connections (its
	// channelz calls), which Collect takes out of Calls.
	Own Calls
	// Health is the server's overall grpc.health.v1 status ("SERVING",
	// "NOT_SERVING"); empty when it serves no health service or the
	// check failed.
	Health string
}

// Socket is one client connection in a Sample.
type Socket struct {
	Remote  string
	Streams int64 // streams (calls) started on it since it opened
}

// Sampler reads a pod's gRPC server counters.
type Sampler interface {
	// Sample reads the server listening on addr. It honours ctx.
	Sample(ctx context.Context, addr netip.AddrPort) (Sample, error)
}

// Channelz samples servers through the grpc.channelz.v1 service they
// serve on their own gRPC port, as grpcdebug does. It finds the server
// whose listen socket is addr (or the unspecified address with addr's
// port), since a process may run several servers (in the lab, every pod of
// every lab). It keeps one connection per address, from a source address
// the kernel picks, and leaves that connection out of the sockets it
// reports; Close closes them. Safe for concurrent use.
//
// Only addresses inside 127.0.0.0/8 are dialled (package loopback).
type Channelz struct {
	// PageSize is how many entries one channelz call asks for; 0 means 100.
	PageSize int

	mu    sync.Mutex
	conns map[netip.AddrPort]*czConn
}

// czConn is a channelz client with the local addresses of its
// connections.
type czConn struct {
	cc     *grpc.ClientConn
	client channelzpb.ChannelzClient
	mu     sync.Mutex
	locals map[string]bool
}

func (c *Channelz) conn(addr netip.AddrPort) (*czConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cz := c.conns[addr]; cz != nil {
		return cz, nil
	}
	cz := &czConn{locals: map[string]bool{}}
	d := loopback.Dialer{}
	cc, err := grpc.NewClient("passthrough:///"+addr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, a)
			if err == nil {
				cz.mu.Lock()
				cz.locals[nc.LocalAddr().String()] = true
				cz.mu.Unlock()
			}
			return nc, err
		}))
	if err != nil {
		return nil, err
	}
	cz.cc, cz.client = cc, channelzpb.NewChannelzClient(cc)
	if c.conns == nil {
		c.conns = map[netip.AddrPort]*czConn{}
	}
	c.conns[addr] = cz
	return cz, nil
}

func (cz *czConn) own(remote string) bool {
	cz.mu.Lock()
	defer cz.mu.Unlock()
	return cz.locals[remote]
}

// Close closes the connections Sample opened.
func (c *Channelz) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cz := range c.conns {
		cz.cc.Close()
		delete(c.conns, a)
	}
	return nil
}

func (c *Channelz) pageSize() int64 {
	if c.PageSize > 0 {
		return int64(c.PageSize)
	}
	return 100
}

// Sample reads the server listening on addr: its call counts and each of
// its client connections with the streams started on it. Errors say what
// failed: the pod does not serve channelz (Unimplemented), no server there
// listens on addr, or the call failed (refused, ctx's deadline).
func (c *Channelz) Sample(ctx context.Context, addr netip.AddrPort) (Sample, error) {
	if err := loopback.CheckIP(addr.Addr()); err != nil {
		return Sample{}, err
	}
	cz, err := c.conn(addr)
	if err != nil {
		return Sample{}, err
	}
	srv, err := c.findServer(ctx, cz.client, addr)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{At: time.Now(), Sockets: map[int64]Socket{}, Health: health(ctx, cz.cc)}
	d := srv.GetData()
	s.Calls = Calls{Started: d.GetCallsStarted(), Succeeded: d.GetCallsSucceeded(), Failed: d.GetCallsFailed()}
	for start := int64(0); ; {
		resp, err := cz.client.GetServerSockets(ctx, &channelzpb.GetServerSocketsRequest{ServerId: srv.GetRef().GetServerId(), StartSocketId: start, MaxResults: c.pageSize()})
		if err != nil {
			return Sample{}, callError(addr, "GetServerSockets", err)
		}
		for _, ref := range resp.GetSocketRef() {
			start = ref.GetSocketId() + 1
			sock, err := cz.client.GetSocket(ctx, &channelzpb.GetSocketRequest{SocketId: ref.GetSocketId()})
			if status.Code(err) == codes.NotFound {
				continue // closed meanwhile
			}
			if err != nil {
				return Sample{}, callError(addr, "GetSocket", err)
			}
			remote := addrString(sock.GetSocket().GetRemote())
			if d := sock.GetSocket().GetData(); cz.own(remote) {
				s.Own.Started += d.GetStreamsStarted()
				s.Own.Succeeded += d.GetStreamsSucceeded()
				s.Own.Failed += d.GetStreamsFailed()
				continue
			}
			s.Sockets[ref.GetSocketId()] = Socket{Remote: remote, Streams: sock.GetSocket().GetData().GetStreamsStarted()}
		}
		if resp.GetEnd() || len(resp.GetSocketRef()) == 0 {
			return s, nil
		}
	}
}

// health returns the server's health: "NOT_SERVING" when its overall
// status or any service's is (grpc.health.v1 List, else the overall
// Check), else the overall status; "" when it has no health service or the
// calls fail. The calls are the sampler's own.
func health(ctx context.Context, cc *grpc.ClientConn) string {
	hc := healthpb.NewHealthClient(cc)
	list, err := hc.List(ctx, &healthpb.HealthListRequest{})
	if err == nil {
		worst := ""
		for _, st := range list.GetStatuses() {
			if worst == "" || st.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
				worst = st.GetStatus().String()
			}
		}
		return worst
	}
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return ""
	}
	return resp.GetStatus().String()
}

// findServer returns the channelz server listening on addr.
func (c *Channelz) findServer(ctx context.Context, client channelzpb.ChannelzClient, addr netip.AddrPort) (*channelzpb.Server, error) {
	var only *channelzpb.Server
	n := 0
	for start := int64(0); ; {
		resp, err := client.GetServers(ctx, &channelzpb.GetServersRequest{StartServerId: start, MaxResults: c.pageSize()})
		if err != nil {
			return nil, callError(addr, "GetServers", err)
		}
		for _, srv := range resp.GetServer() {
			start = srv.GetRef().GetServerId() + 1
			n++
			only = srv
			for _, ls := range srv.GetListenSocket() {
				if listensOn(ctx, client, ls, addr) {
					return srv, nil
				}
			}
		}
		if resp.GetEnd() || len(resp.GetServer()) == 0 {
			break
		}
	}
	if n == 1 {
		return only, nil // a process with one server: that one, whatever its listen sockets say
	}
	return nil, fmt.Errorf("channelz at %s lists %d servers, none listening on %s", addr, n, addr)
}

// listensOn reports whether the listen socket ref is addr: by its name
// (grpc-go names listen sockets by their address), else by asking for the
// socket.
func listensOn(ctx context.Context, client channelzpb.ChannelzClient, ref *channelzpb.SocketRef, addr netip.AddrPort) bool {
	match := func(ap netip.AddrPort) bool {
		return ap.Port() == addr.Port() && (ap.Addr().Unmap() == addr.Addr() || ap.Addr().IsUnspecified())
	}
	if ap, err := netip.ParseAddrPort(ref.GetName()); err == nil {
		return match(ap)
	}
	sock, err := client.GetSocket(ctx, &channelzpb.GetSocketRequest{SocketId: ref.GetSocketId()})
	if err != nil {
		return false
	}
	ap, err := netip.ParseAddrPort(addrString(sock.GetSocket().GetLocal()))
	return err == nil && match(ap)
}

// addrString formats a channelz address as "IP:port" (empty for other
// kinds).
func addrString(a *channelzpb.Address) string {
	tcp := a.GetTcpipAddress()
	if tcp == nil {
		return ""
	}
	ip, ok := netip.AddrFromSlice(tcp.GetIpAddress())
	if !ok {
		return ""
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(tcp.GetPort())).String()
}

// callError explains a failed channelz call.
func callError(addr netip.AddrPort, method string, err error) error {
	switch status.Code(err) {
	case codes.Unimplemented:
		return fmt.Errorf("%s serves no channelz (grpc.channelz.v1 %s: Unimplemented); register google.golang.org/grpc/channelz/service on the server", addr, method)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: channelz %s timed out", addr, method)
	}
	return fmt.Errorf("%s: channelz %s: %v", addr, method, status.Convert(err).Message())
}
