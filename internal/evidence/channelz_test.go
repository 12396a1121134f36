package evidence_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc"
	channelzsvc "google.golang.org/grpc/channelz/service"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// startChannelz serves grpc-go's channelz and health services on
// 127.0.0.1, on a port the kernel picks, until the test ends, and returns
// the address.
func startChannelz(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := loopback.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	channelzsvc.RegisterChannelzServiceToServer(s)
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return loopback.AddrPort(l.Addr())
}

// otherClient connects to addr, makes n health checks and returns its
// connection's local address (the remote the server sees).
func otherClient(t *testing.T, addr netip.AddrPort, n int) string {
	t.Helper()
	var local string
	cc, err := grpc.NewClient("passthrough:///"+addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := loopback.Dialer{}.DialContext(ctx, a)
			if err == nil {
				local = c.LocalAddr().String()
			}
			return c, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	cc.Connect()
	for range n {
		if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 { // connected, with no call on it
		for s := cc.GetState(); s.String() != "READY"; s = cc.GetState() {
			if !cc.WaitForStateChange(context.Background(), s) {
				t.Fatal("the other client never connected")
			}
		}
	}
	return local
}

// relayDialer dials directly but says it is a relay, so that the sampler
// cannot tell its own connection by its local address.
type relayDialer struct{}

func (relayDialer) DialContext(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	return loopback.Dialer{}.DialContext(ctx, addr.String())
}
func (relayDialer) Relayed() bool { return true }

// TestChannelzOwnConnection: the sampler leaves out exactly its own
// connection, by its local address when it dials directly and by its
// stream count through a relay, while another client's idle connection
// has made every number of calls the sampler's count passes through (an
// idle connection with as many streams is not the sampler's: one of its
// streams is in flight).
func TestChannelzOwnConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dialer evidence.Dialer
	}{
		{"direct", nil},
		{"relay", relayDialer{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for n := range 16 {
				addr := startChannelz(t)
				other := otherClient(t, addr, n)
				cz := &evidence.Channelz{Dialer: tc.dialer}
				for reading := range 3 {
					s, err := cz.Sample(context.Background(), addr)
					if err != nil {
						t.Fatal(err)
					}
					var remotes []string
					for _, sk := range s.Sockets {
						remotes = append(remotes, sk.Remote)
					}
					if len(remotes) != 1 || remotes[0] != other || s.Own.Started == 0 {
						t.Errorf("other client with %d calls, reading %d: sockets %v, own %+v; want only the other client's (%s) and the sampler's own calls counted", n, reading, remotes, s.Own, other)
					}
				}
				cz.Close()
			}
		})
	}
}
