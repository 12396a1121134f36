package podtest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial returns a gRPC channel to addr ("ip:port") that connects from
// source (the zero Addr: the kernel's choice) without TLS, with grpc-go's
// defaults (pick_first: one connection); it closes when the test ends.
func Dial(t testing.TB, addr string, source netip.Addr) *grpc.ClientConn {
	t.Helper()
	d := loopback.Dialer{Source: source}
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, a) }))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Connect opens a TCP connection to addr with a 300 ms timeout, closes it,
// and says how it went: "connected", "refused", "timeout" or the error.
func Connect(addr string) string {
	return connectResult(loopback.Dialer{Timeout: 300 * time.Millisecond}.DialContext(context.Background(), addr))
}

// ConnectInNetns is Connect to any address, IPv6 too, without package
// loopback's check: for a test that runs in a network namespace of its
// own, from which nothing leads out.
func ConnectInNetns(addr string) string {
	d := net.Dialer{Timeout: 300 * time.Millisecond}
	return connectResult(d.DialContext(context.Background(), "tcp", addr))
}

// connectResult says how a connect went, closing c.
func connectResult(c net.Conn, err error) string {
	var ne net.Error
	switch {
	case err == nil:
		c.Close()
		return "connected"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return err.Error()
}

// CompareThroughput makes b.N GetPrice calls on each of direct and via,
// with callers closed-loop callers sharing each channel, alternating in
// four chunks so that machine noise hits both alike. It reports the calls/s
// of each as "direct-calls/s" and "<name>-calls/s", their ratio as
// "<name>/direct", and no ns/op.
func CompareThroughput(b *testing.B, direct, via pricingv1.PricingClient, name string, callers int) {
	const chunks = 4
	var tDirect, tVia time.Duration
	b.ResetTimer()
	for c := 0; c < chunks; c++ {
		n := b.N / chunks
		if c == 0 {
			n += b.N % chunks
		}
		tDirect += drive(b, direct, callers, n)
		tVia += drive(b, via, callers, n)
	}
	b.StopTimer()
	d, v := float64(b.N)/tDirect.Seconds(), float64(b.N)/tVia.Seconds()
	b.ReportMetric(d, "direct-calls/s")
	b.ReportMetric(v, name+"-calls/s")
	b.ReportMetric(v/d, name+"/direct")
	b.ReportMetric(0, "ns/op")
}

// drive makes n calls from callers goroutines and returns the time taken.
func drive(b testing.TB, c pricingv1.PricingClient, callers, n int) time.Duration {
	var wg sync.WaitGroup
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for range work {
				if _, err := c.GetPrice(context.Background(), &pricingv1.GetPriceRequest{Sku: "a"}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
