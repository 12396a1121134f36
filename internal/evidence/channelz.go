package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podforward"
	"google.golang.org/grpc"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
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

// ErrNoChannelz is wrapped by Channelz.Sample's error when the server
// answers but serves no grpc.channelz.v1.
var ErrNoChannelz = errors.New("serves no channelz")

// Sampler reads a pod's gRPC server counters.
type Sampler interface {
	// Sample reads the server listening on addr. It honours ctx.
	Sample(ctx context.Context, addr netip.AddrPort) (Sample, error)
}

// Channelz samples servers through the grpc.channelz.v1 service they
// serve on their own gRPC port, as grpcdebug does. It finds the server
// whose listen socket is addr (or the unspecified address with addr's
// port), since a process may run several servers (in the lab, every pod of
// every lab). It keeps one connection per address, made by its Dialer, and
// leaves that connection out of the sockets it reports (see Sample); Close
// closes them, and the Dialer if it is an io.Closer. Safe for concurrent
// use; the samples of one address are taken one at a time.
type Channelz struct {
	// PageSize is how many entries one channelz call asks for; 0 means 100.
	PageSize int
	// Dialer connects to each pod's server. nil means a direct dial to
	// addresses inside 127.0.0.0/8 only (package loopback: the lab's pods
	// and the tests'); Direct dials any address; PortForward (package
	// podforward's) goes through the API server.
	Dialer Dialer

	mu    sync.Mutex
	conns map[netip.AddrPort]*czConn
}

// Dialer connects a Channelz sampler to a pod's gRPC server.
type Dialer interface {
	// DialContext connects to the server at addr, the pod's IP and the
	// port its Service sends to. It honours ctx.
	DialContext(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

// Relay is implemented by a Dialer whose connections reach the server
// through a relay that dials the server anew, such as the API server's
// port-forward (the kubelet, or the container runtime, connects to the
// pod): the server sees the relay's address as the remote end, not the
// local address of the connection DialContext returned. When Relayed
// reports true, the sampler tells its own connection by its stream count
// alone.
type Relay interface {
	Relayed() bool
}

// Direct dials the pod's address itself, with no restriction on the
// address: for a run inside the cluster (whose network routes pod IPs) or
// on a network that routes them (pinlab diagnose --direct). The server
// sees the connection's local address.
type Direct struct {
	// Timeout bounds the connect; 0 means ctx's deadline only.
	Timeout time.Duration
}

// DialContext connects to addr over TCP.
func (d Direct) DialContext(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	nd := net.Dialer{Timeout: d.Timeout}
	return nd.DialContext(ctx, "tcp", addr.String())
}

// PortForward is package podforward's dialer, which reaches the pods
// through the API server's port-forward as kubectl port-forward does;
// give it Kube's Config and PodByIP. It is named here too so that
// internal/cli builds diagnose's dialers from evidence alone (the CLI's
// import budget, internal/layout).
type PortForward = podforward.PortForward

// PortForward's connections come to the server from the kubelet's side:
// it must say so as a Relay, or Sample would look for its own connection
// by a local address the server never sees.
var _ interface {
	Dialer
	Relay
} = (*PortForward)(nil)

// loopbackDialer is the default Dialer: package loopback's rule.
type loopbackDialer struct{}

func (loopbackDialer) DialContext(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	return loopback.Dialer{}.DialContext(ctx, addr.String())
}

// czConn is a channelz client with what tells its own connection apart:
// the local addresses of its direct dials, and the streams it started on
// each of its transports.
type czConn struct {
	cc     *grpc.ClientConn
	client channelzpb.ChannelzClient
	relay  bool
	// sample is held through a Sample: the stream count must be its
	// calls' alone while it reads the sockets.
	sample sync.Mutex

	mu      sync.Mutex
	locals  map[string]bool  // local addresses of direct dials
	streams map[string]int64 // streams started, by the transport's local address
	last    string           // the transport of the last stream started
	ownID   int64            // the socket last found to be its own
	dialErr error            // the last dial's
}

func (c *Channelz) dialer() Dialer {
	if c.Dialer == nil {
		return loopbackDialer{}
	}
	return c.Dialer
}

func (c *Channelz) conn(addr netip.AddrPort) (*czConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cz := c.conns[addr]; cz != nil {
		return cz, nil
	}
	d := c.dialer()
	cz := &czConn{locals: map[string]bool{}, streams: map[string]int64{}}
	if r, ok := d.(Relay); ok {
		cz.relay = r.Relayed()
	}
	cc, err := grpc.NewClient("passthrough:///"+addr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(streamCounter{cz}),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, addr)
			cz.mu.Lock()
			defer cz.mu.Unlock()
			cz.dialErr = err
			if err == nil && !cz.relay {
				cz.locals[nc.LocalAddr().String()] = true
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

// streamCounter counts the streams a czConn starts on each of its
// transports: grpc-go reports a client's OutHeader once the transport
// created the stream, so a call that never reached a transport is not
// counted.
type streamCounter struct{ cz *czConn }

func (streamCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (streamCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (streamCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func (s streamCounter) HandleRPC(_ context.Context, st stats.RPCStats) {
	if h, ok := st.(*stats.OutHeader); ok && h.Client {
		local := fmt.Sprint(h.LocalAddr)
		s.cz.mu.Lock()
		s.cz.streams[local]++
		s.cz.last = local
		s.cz.mu.Unlock()
	}
}

// started returns the streams started on the transport of the last
// stream.
func (cz *czConn) started() int64 {
	cz.mu.Lock()
	defer cz.mu.Unlock()
	return cz.streams[cz.last]
}

func (cz *czConn) local(remote string) bool {
	cz.mu.Lock()
	defer cz.mu.Unlock()
	return cz.locals[remote]
}

// Close closes the connections Sample opened, then the Dialer if it is an
// io.Closer, and returns the Dialer's error.
func (c *Channelz) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cz := range c.conns {
		cz.cc.Close()
		delete(c.conns, a)
	}
	if cl, ok := c.Dialer.(io.Closer); ok {
		return cl.Close()
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
// listens on addr, or the call failed (refused, ctx's deadline, the
// Dialer's error).
//
// The sampler's own connection is left out of Sockets and counted in Own.
// It is the socket whose remote address is the local address of a direct
// dial; else (through a Relay, or when a NAT hides that address) the
// socket whose streams started equal the streams the sampler had started
// on its transport when it read that socket, one of them (that GetSocket)
// still in flight; if several match, the one found before, else the one
// whose last stream started most recently.
func (c *Channelz) Sample(ctx context.Context, addr netip.AddrPort) (Sample, error) {
	if c.Dialer == nil {
		if err := loopback.CheckIP(addr.Addr()); err != nil {
			return Sample{}, err
		}
	}
	cz, err := c.conn(addr)
	if err != nil {
		return Sample{}, err
	}
	cz.sample.Lock()
	defer cz.sample.Unlock()
	srv, err := c.findServer(ctx, cz, addr)
	if err != nil {
		return Sample{}, err
	}
	socks, err := c.sockets(ctx, cz, srv.GetRef().GetServerId(), addr)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{At: time.Now(), Sockets: map[int64]Socket{}}
	d := srv.GetData()
	s.Calls = Calls{Started: d.GetCallsStarted(), Succeeded: d.GetCallsSucceeded(), Failed: d.GetCallsFailed()}
	own := cz.own(socks)
	for _, sk := range socks {
		if sk.id == own {
			s.Own.Started += sk.data.GetStreamsStarted()
			s.Own.Succeeded += sk.data.GetStreamsSucceeded()
			s.Own.Failed += sk.data.GetStreamsFailed()
			continue
		}
		s.Sockets[sk.id] = Socket{Remote: sk.remote, Streams: sk.data.GetStreamsStarted()}
	}
	s.Health = health(ctx, cz.cc)
	return s, nil
}

// socket is one server socket as read, with the streams the sampler had
// started on its transport when it read it.
type socket struct {
	id     int64
	remote string
	data   *channelzpb.SocketData
	ours   int64
}

// sockets reads every socket of the server with id.
func (c *Channelz) sockets(ctx context.Context, cz *czConn, id int64, addr netip.AddrPort) ([]socket, error) {
	var out []socket
	for start := int64(0); ; {
		resp, err := cz.client.GetServerSockets(ctx, &channelzpb.GetServerSocketsRequest{ServerId: id, StartSocketId: start, MaxResults: c.pageSize()})
		if err != nil {
			return nil, cz.callError(addr, "GetServerSockets", err)
		}
		for _, ref := range resp.GetSocketRef() {
			start = ref.GetSocketId() + 1
			sock, err := cz.client.GetSocket(ctx, &channelzpb.GetSocketRequest{SocketId: ref.GetSocketId()})
			if status.Code(err) == codes.NotFound {
				continue // closed meanwhile
			}
			if err != nil {
				return nil, cz.callError(addr, "GetSocket", err)
			}
			s := sock.GetSocket()
			out = append(out, socket{id: ref.GetSocketId(), remote: addrString(s.GetRemote()), data: s.GetData(), ours: cz.started()})
		}
		if resp.GetEnd() || len(resp.GetSocketRef()) == 0 {
			return out, nil
		}
	}
}

// own returns the ID of the sampler's own socket among socks (see
// Sample), or 0 when none is.
func (cz *czConn) own(socks []socket) int64 {
	var match []socket
	for _, sk := range socks {
		if cz.local(sk.remote) {
			return sk.id
		}
		d := sk.data
		if d.GetStreamsStarted() == sk.ours && d.GetStreamsStarted()-d.GetStreamsSucceeded()-d.GetStreamsFailed() >= 1 {
			match = append(match, sk)
		}
	}
	if len(match) == 0 {
		return 0
	}
	cz.mu.Lock()
	defer cz.mu.Unlock()
	pick := match[0]
	for _, sk := range match[1:] {
		switch {
		case pick.id == cz.ownID:
		case sk.id == cz.ownID, sk.data.GetLastRemoteStreamCreatedTimestamp().AsTime().After(pick.data.GetLastRemoteStreamCreatedTimestamp().AsTime()):
			pick = sk
		}
	}
	cz.ownID = pick.id
	return pick.id
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
func (c *Channelz) findServer(ctx context.Context, cz *czConn, addr netip.AddrPort) (*channelzpb.Server, error) {
	client := cz.client
	var only *channelzpb.Server
	n := 0
	for start := int64(0); ; {
		resp, err := client.GetServers(ctx, &channelzpb.GetServersRequest{StartServerId: start, MaxResults: c.pageSize()})
		if err != nil {
			return nil, cz.callError(addr, "GetServers", err)
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

// callError explains a failed channelz call: with the Dialer's error
// when the call failed for want of a connection.
func (cz *czConn) callError(addr netip.AddrPort, method string, err error) error {
	cz.mu.Lock()
	dialErr := cz.dialErr
	cz.mu.Unlock()
	switch status.Code(err) {
	case codes.Unavailable:
		if dialErr != nil {
			return fmt.Errorf("%s: channelz %s: %w", addr, method, dialErr)
		}
	case codes.Unimplemented:
		return fmt.Errorf("%s %w (grpc.channelz.v1 %s: Unimplemented); register google.golang.org/grpc/channelz/service on the server", addr, ErrNoChannelz, method)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: channelz %s timed out", addr, method)
	}
	return fmt.Errorf("%s: channelz %s: %v", addr, method, status.Convert(err).Message())
}
