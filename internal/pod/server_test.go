package pod_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStartRefusesAgeGrpcCannotTake: a config that would panic inside
// grpc-go's keepalive at the first connection is refused by Start.
func TestStartRefusesAgeGrpcCannotTake(t *testing.T) {
	s := pod.New(pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.203.200.1:0"), MaxConnectionAge: 5})
	if err := s.Start(labtest.Context(t, 10*time.Second)); err == nil {
		s.Kill()
		t.Fatal("Start took MaxConnectionAge 5ns")
	}
}

// startServer starts a server named pricing-abc in shop on 127.203.200.1
// with a free port until the test ends; cfg's Name, Namespace and Addr are
// overwritten.
func startServer(t *testing.T, cfg pod.Config) *pod.Server {
	t.Helper()
	cfg.Name, cfg.Namespace = "pricing-abc", "shop"
	cfg.Addr = netip.MustParseAddrPort("127.203.200.1:0")
	return podtest.Start(t, cfg)
}

// dial returns a channel to s from 127.203.200.9.
func dial(t *testing.T, s *pod.Server) *grpc.ClientConn {
	t.Helper()
	return podtest.Dial(t, s.Addr().String(), netip.MustParseAddr("127.203.200.9"))
}

func TestGetPriceNamesThePod(t *testing.T) {
	rec := &podtest.Recorder{}
	s := startServer(t, pod.Config{Observer: rec})
	cc := dial(t, s)
	resp, err := pricingv1.NewPricingClient(cc).GetPrice(context.Background(), &pricingv1.GetPriceRequest{Sku: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetPod() != "pricing-abc" || resp.GetPodIp() != "127.203.200.1" || resp.GetNamespace() != "shop" {
		t.Errorf("reply %v does not name pod pricing-abc at 127.203.200.1 in shop", resp)
	}
	again, _ := pricingv1.NewPricingClient(cc).GetPrice(context.Background(), &pricingv1.GetPriceRequest{Sku: "a"})
	if again.GetPriceCents() != resp.GetPriceCents() {
		t.Errorf("price of one SKU changed: %d then %d", resp.GetPriceCents(), again.GetPriceCents())
	}
	h, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v; want SERVING", h, err)
	}
	if opened, _ := rec.Conns(); rec.Count("/pricing.v1.Pricing/GetPrice", codes.OK) != 2 || opened != 1 {
		t.Errorf("observer saw %v and %d connections; want 2 GetPrice calls on 1 connection", rec, opened)
	}
}

func TestWatchPricesStreams(t *testing.T) {
	s := startServer(t, pod.Config{})
	stream, err := pricingv1.NewPricingClient(dial(t, s)).WatchPrices(context.Background(), &pricingv1.WatchPricesRequest{Sku: "a", IntervalMs: 1, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for {
		m, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.OK && err.Error() != "EOF" {
				t.Fatalf("stream ended with %v", err)
			}
			break
		}
		seqs = append(seqs, m.GetSeq())
	}
	if diff := cmp.Diff([]int64{1, 2, 3}, seqs); diff != "" {
		t.Errorf("sequence (-want +got):\n%s", diff)
	}
}

// TestMaxConnectionAgeDrainsWithoutErrors: calls shorter than the grace
// period survive many GOAWAY cycles without a single failure, and the
// client really did reconnect each time.
func TestMaxConnectionAgeDrainsWithoutErrors(t *testing.T) {
	rec := &podtest.Recorder{}
	s := startServer(t, pod.Config{MaxConnectionAge: 50 * time.Millisecond, MaxConnectionAgeGrace: time.Second, Observer: rec})
	c := pricingv1.NewPricingClient(dial(t, s))
	deadline := time.Now().Add(10 * time.Second)
	for calls := 0; ; calls++ {
		cycles, _ := rec.Conns()
		if cycles > 20 {
			t.Logf("%d calls over %d connections", calls, cycles)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d connections in 10s; MaxConnectionAge 50ms did not recycle them", cycles)
		}
		if _, err := c.GetPrice(context.Background(), &pricingv1.GetPriceRequest{Sku: "a"}); err != nil {
			t.Fatalf("call %d failed during connection-age drains: %v", calls, err)
		}
	}
}

func TestStopLetsInFlightStreamFinishWithinGrace(t *testing.T) {
	s := pod.New(pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.203.200.2:0")})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stream, err := pricingv1.NewPricingClient(dial(t, s)).WatchPrices(context.Background(), &pricingv1.WatchPricesRequest{IntervalMs: 20, Count: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped <- s.Stop(ctx)
	}()
	n := 1
	for ; ; n++ {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	if n != 5 {
		t.Errorf("stream got %d messages during graceful stop, want all 5", n)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestSetHealthy: an unhealthy server reports NOT_SERVING for
// pricing.v1.Pricing (the overall status stays SERVING) and fails its calls
// with UNAVAILABLE; healthy again, it serves.
func TestSetHealthy(t *testing.T) {
	s := startServer(t, pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.203.40.1:0")})
	conn := dial(t, s)
	hc, pc := healthpb.NewHealthClient(conn), pricingv1.NewPricingClient(conn)
	ctx := labtest.Context(t, 5*time.Second)
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	s.SetHealthy(false)
	if got := check(pricingv1.Pricing_ServiceDesc.ServiceName); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("pricing health %v while unhealthy, want NOT_SERVING", got)
	}
	if got := check(""); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("overall health %v while unhealthy, want SERVING (probes keep passing)", got)
	}
	if _, err := pc.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetPrice while unhealthy: %v, want UNAVAILABLE", err)
	}
	s.SetHealthy(true)
	if got := check(pricingv1.Pricing_ServiceDesc.ServiceName); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("pricing health %v once healthy, want SERVING", got)
	}
	if _, err := pc.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"}); err != nil {
		t.Errorf("GetPrice once healthy: %v", err)
	}
}

// TestServiceTime: a call takes at least the service time, and a deadline
// shorter than it ends the call with DEADLINE_EXCEEDED.
func TestServiceTime(t *testing.T) {
	s := startServer(t, pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.203.40.2:0"), ServiceTime: 80 * time.Millisecond})
	pc := pricingv1.NewPricingClient(dial(t, s))
	ctx := labtest.Context(t, 5*time.Second)
	start := time.Now()
	if _, err := pc.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 80*time.Millisecond {
		t.Errorf("call took %v, want at least the 80ms service time", took)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := pc.GetPrice(short, &pricingv1.GetPriceRequest{Sku: "a"}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call with a 20ms deadline: %v, want DEADLINE_EXCEEDED", err)
	}
}

// TestFailPercent: a pod with FailPercent fails that share of its calls
// with INTERNAL (every call at 100, none at 0), each call drawn on its
// own: two callers taking turns each see about that share, not one all
// of the failures (as failing every n-th call would give them).
func TestFailPercent(t *testing.T) {
	for i, tt := range []struct{ percent, lo, hi int }{{0, 0, 0}, {50, 400, 600}, {30, 220, 380}, {100, 1000, 1000}} {
		s := startServer(t, pod.Config{Name: fmt.Sprintf("p-%d", i), Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 203, 41, byte(i + 1)}), 0), FailPercent: tt.percent})
		pc := pricingv1.NewPricingClient(dial(t, s))
		ctx := labtest.Context(t, 20*time.Second)
		var failed [2]int // by caller: calls alternate between two
		for n := range 2000 {
			_, err := pc.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"})
			switch status.Code(err) {
			case codes.OK:
			case codes.Internal:
				failed[n%2]++
			default:
				t.Fatalf("call: %v", err)
			}
		}
		for caller, f := range failed {
			if f < tt.lo || f > tt.hi {
				t.Errorf("--fail-percent=%d: caller %d saw %d of its 1000 calls fail, want %d to %d", tt.percent, caller, f, tt.lo, tt.hi)
			}
		}
	}
}

// TestORCA: a pod with ORCA reports, in each answer's trailer, the calls
// it answered in the last second and their time in service per second; a
// pod 4 times slower reports about 4 times the utilization at the same
// rate. Without ORCA there is no report.
func TestORCA(t *testing.T) {
	report := func(serviceTime time.Duration, on bool, ip byte) *v3orcapb.OrcaLoadReport {
		s := startServer(t, pod.Config{Name: "p", Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 203, 42, ip}), 0), ServiceTime: serviceTime, ORCA: on})
		pc := pricingv1.NewPricingClient(dial(t, s))
		ctx := labtest.Context(t, 10*time.Second)
		var md metadata.MD
		for range 10 {
			if _, err := pc.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"}, grpc.Trailer(&md)); err != nil {
				t.Fatal(err)
			}
		}
		// gRFC A51's per-call report: the trailer endpoint-load-metrics-bin.
		vs := md.Get("endpoint-load-metrics-bin")
		if len(vs) == 0 {
			return nil
		}
		r := &v3orcapb.OrcaLoadReport{}
		if err := proto.Unmarshal([]byte(vs[0]), r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := report(0, false, 1); r != nil {
		t.Errorf("a pod without ORCA reported %v", r)
	}
	fast, slow := report(5*time.Millisecond, true, 2), report(20*time.Millisecond, true, 3)
	if fast.GetRpsFractional() < 9 || slow.GetRpsFractional() < 9 {
		t.Errorf("reported %v and %v calls/s after 10 calls, want at least 9 (the report counts the call it ends)", fast.GetRpsFractional(), slow.GetRpsFractional())
	}
	// 10 calls of 5ms (20ms) in the last second: 0.05 (0.2) at least.
	if f, s := fast.GetApplicationUtilization(), slow.GetApplicationUtilization(); f < 0.045 || s < 0.18 || s/f < 3 || s/f > 5 {
		t.Errorf("utilization %.3f (5ms calls) and %.3f (20ms calls); want about 0.05 and 0.2, 4 times apart", f, s)
	}
}
