package pod_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestBlackholeTimesOut(t *testing.T) {
	addr := netip.MustParseAddrPort("127.203.201.1:8471")
	if got := podtest.Connect(addr.String()); got != "refused" {
		t.Fatalf("before the blackhole: %s, want refused", got)
	}
	b, err := pod.NewBlackhole(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := podtest.Connect(addr.String()); got != "timeout" {
			t.Errorf("dial %d to the blackhole: %s, want timeout", i, got)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := podtest.Connect(addr.String()); got != "refused" {
		t.Errorf("after Close: %s, want refused", got)
	}
	if _, err := pod.NewBlackhole(context.Background(), netip.MustParseAddrPort("10.1.2.3:80"), nil); err == nil {
		t.Error("pod.NewBlackhole outside loopback succeeded")
	}
}

func getPrice(cc pricingv1.PricingClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cc.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"})
	return err
}

func TestHangStallsCallsAndConnects(t *testing.T) {
	s := startServer(t, pod.Config{})
	c := pricingv1.NewPricingClient(dial(t, s))
	if err := getPrice(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Hang(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := getPrice(c, 300*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call on an open connection to a hung server: %v, want DEADLINE_EXCEEDED", err)
	}
	if got := podtest.Connect(s.Addr().String()); got != "timeout" {
		t.Errorf("connect to a hung server: %s, want timeout", got)
	}
	if err := s.Hang(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := getPrice(c, 5*time.Second); err != nil {
		t.Errorf("call after the hang ended: %v", err)
	}
	if got := podtest.Connect(s.Addr().String()); got != "connected" {
		t.Errorf("connect after the hang ended: %s", got)
	}
}

func TestHungServerIgnoresSIGTERM(t *testing.T) {
	s := startServer(t, pod.Config{})
	if err := s.Hang(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Stop(ctx); !errors.Is(err, pod.ErrHardStop) {
		t.Errorf("Stop of a hung server: %v, want ErrHardStop", err)
	}
	if got := podtest.Connect(s.Addr().String()); got != "refused" {
		t.Errorf("address of a stopped server: %s, want refused", got)
	}
	if err := s.Hang(context.Background(), false); !errors.Is(err, pod.ErrNotServing) {
		t.Errorf("Hang after Stop: %v, want ErrNotServing", err)
	}
}

// TestHardStopEndsHandshakes: the hard stop at the grace period's end
// closes a connection grpc-go is still handshaking, as SIGKILL would,
// hung or not. grpc-go's Stop waits for handshakes, up to its 120 s
// connection timeout; a hang holds a handshake with no bound, even one
// whose peer closed (a kubelet's TCP probe).
func TestHardStopEndsHandshakes(t *testing.T) {
	for _, tt := range []struct {
		name             string
		hung, peerClosed bool
	}{
		{name: "serving"},
		{name: "hung", hung: true},
		{name: "hung, the peer closed", hung: true, peerClosed: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, pod.Config{})
			raw, err := loopback.Dialer{}.DialContext(context.Background(), s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			waitConns(t, s, 1) // accepted, so handshaking: raw sends no preface
			if tt.hung {
				if err := s.Hang(context.Background(), true); err != nil {
					t.Fatal(err)
				}
			}
			if tt.peerClosed {
				raw.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			stopped := make(chan error, 1)
			go func() { stopped <- s.Stop(ctx) }()
			select {
			case err := <-stopped:
				if !errors.Is(err, pod.ErrHardStop) {
					t.Errorf("Stop: %v, want ErrHardStop", err)
				}
			case <-time.After(10 * time.Second):
				s.Kill()
				<-stopped
				t.Errorf("Stop with a connection in its handshake: still waiting 10 s after the 200 ms grace")
			}
		})
	}
}

// openStream starts an endless WatchPrices and waits for its first message.
func openStream(t *testing.T, s *pod.Server) pricingv1.Pricing_WatchPricesClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := pricingv1.NewPricingClient(dial(t, s)).WatchPrices(ctx, &pricingv1.WatchPricesRequest{Sku: "a", IntervalMs: 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	return stream
}

func drain(stream pricingv1.Pricing_WatchPricesClient) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

func TestKillResetsConnections(t *testing.T) {
	s := startServer(t, pod.Config{})
	stream := openStream(t, s)
	// A raw connection that never writes shows what the kernel sends: a
	// reader sees ECONNRESET only after an RST. (On the gRPC connection the
	// client also writes, and whichever of its reader and writer sees the
	// RST first takes the error, so the stream may report EOF.)
	raw, err := loopback.Dialer{}.DialContext(context.Background(), s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	waitConns(t, s, 2)
	s.Kill()
	// The server's HTTP/2 SETTINGS may come first; read until the end.
	if _, err := io.Copy(io.Discard, raw); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("raw connection to a killed server: read ended with %v, want ECONNRESET", err)
	}
	err = drain(stream)
	if status.Code(err) != codes.Unavailable || strings.Contains(strings.ToLower(err.Error()), "goaway") {
		t.Errorf("stream on a killed server ended with %v, want UNAVAILABLE without a GOAWAY", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after Kill")
	}
}

// waitConns waits until the server has accepted n connections.
func waitConns(t *testing.T, s *pod.Server, n int) {
	t.Helper()
	accepted := func() bool { return pod.Accepted(s) >= n }
	if labtest.Poll(labtest.Context(t, 10*time.Second), 5*time.Millisecond, accepted) != nil {
		t.Fatalf("server accepted %d connections, want %d", pod.Accepted(s), n)
	}
}

func TestStopHardAtGraceEnd(t *testing.T) {
	s := startServer(t, pod.Config{})
	stream := openStream(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Stop(ctx); !errors.Is(err, pod.ErrHardStop) {
		t.Errorf("Stop with an endless stream: %v, want ErrHardStop", err)
	}
	if err := drain(stream); status.Code(err) != codes.Unavailable {
		t.Errorf("stream cut at the grace end: %v, want UNAVAILABLE", err)
	}
}

func TestDrainDelayKeepsServing(t *testing.T) {
	s := startServer(t, pod.Config{DrainDelay: 700 * time.Millisecond})
	cc := dial(t, s)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	h := healthpb.NewHealthClient(cc)
	var resp *healthpb.HealthCheckResponse
	var err error
	notServing := func() bool {
		resp, err = h.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	}
	if labtest.Poll(labtest.Context(t, 5*time.Second), 5*time.Millisecond, notServing) != nil {
		t.Fatalf("health never NOT_SERVING after SIGTERM: %v %v", resp, err)
	}
	// Still in the drain delay: new connections and calls work.
	if err := getPrice(pricingv1.NewPricingClient(dial(t, s)), 5*time.Second); err != nil {
		t.Errorf("call on a new connection during the drain delay: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	if got := podtest.Connect(s.Addr().String()); got != "refused" {
		t.Errorf("after the graceful stop: %s, want refused", got)
	}
}

func TestStartupDelayRefusesUntilListening(t *testing.T) {
	s := podtest.Start(t, pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.203.201.2:8471"), StartupDelay: 400 * time.Millisecond})
	if got := podtest.Connect("127.203.201.2:8471"); got != "refused" {
		t.Errorf("during the startup delay: %s, want refused", got)
	}
	if err := s.Hang(context.Background(), true); !errors.Is(err, pod.ErrNotServing) {
		t.Errorf("Hang before listening: %v, want ErrNotServing", err)
	}
	listening := func() bool { return podtest.Connect("127.203.201.2:8471") == "connected" }
	if labtest.Poll(labtest.Context(t, 10*time.Second), 20*time.Millisecond, listening) != nil {
		t.Fatal("server never listened after its startup delay")
	}
}

func TestStopDuringStartupDelay(t *testing.T) {
	s := pod.New(pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.203.201.3:8471"), StartupDelay: time.Hour})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("Stop before listening: %v", err)
	}
	<-s.Done()
}

func TestStartupBindFailureEndsServer(t *testing.T) {
	addr := netip.MustParseAddrPort("127.203.201.4:8471")
	ln, err := loopback.Listen(context.Background(), addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := pod.New(pod.Config{Name: "p", Addr: addr, StartupDelay: time.Millisecond})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server with a taken address did not exit")
	}
	if s.Err() == nil {
		t.Error("Err is nil after a failed listen")
	}
}

// TestStreamLongerThanMaxConnectionAgeGraceFails: grpc-go closes a
// connection MaxConnectionAgeGrace after its GOAWAY, whatever still runs on
// it.
func TestStreamLongerThanMaxConnectionAgeGraceFails(t *testing.T) {
	s := startServer(t, pod.Config{MaxConnectionAge: 100 * time.Millisecond, MaxConnectionAgeGrace: 300 * time.Millisecond})
	stream := openStream(t, s)
	start := time.Now()
	err := drain(stream)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("stream past MaxConnectionAge+Grace ended with %v, want UNAVAILABLE", err)
	}
	t.Logf("stream cut after %v: %v", time.Since(start), err)
}
