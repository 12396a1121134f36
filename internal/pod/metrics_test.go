package pod_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// scrape GETs url and returns the body.
func scrape(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// TestPodReportsLikeAService: two pods in one process each export the
// grpc-ecosystem provider's metrics for their own calls only, serve the
// health service, and their channelz lists the server with its listen
// address and per-socket call counts.
func TestPodReportsLikeAService(t *testing.T) {
	a := podtest.Start(t, pod.Config{Name: "a", Namespace: "shop", Addr: netip.MustParseAddrPort("127.203.201.1:0"), MetricsAddr: netip.MustParseAddrPort("127.203.201.1:0")})
	b := podtest.Start(t, pod.Config{Name: "b", Namespace: "shop", Addr: netip.MustParseAddrPort("127.203.201.2:0"), MetricsAddr: netip.MustParseAddrPort("127.203.201.2:0")})
	ctx := context.Background()
	cc := podtest.Dial(t, a.Addr().String(), netip.MustParseAddr("127.203.201.9"))
	for range 3 {
		if _, err := pricingv1.NewPricingClient(cc).GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "pricing.v1.Pricing"}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", r, err)
	}

	const handled = `grpc_server_handled_total{grpc_code="OK",grpc_method="GetPrice",grpc_service="pricing.v1.Pricing",grpc_type="unary"}`
	for _, tt := range []struct {
		name string
		srv  *pod.Server
		want string
	}{
		{"a", a, handled + " 3"},
		{"b", b, handled + " 0"},
	} {
		body := scrape(t, fmt.Sprintf("http://%s%s", tt.srv.MetricsAddr(), pod.MetricsPath))
		if !strings.Contains(body, tt.want+"\n") {
			t.Errorf("pod %s metrics lack %q:\n%s", tt.name, tt.want, body)
		}
		for _, name := range []string{"grpc_server_started_total", "grpc_server_handling_seconds_bucket"} {
			if !strings.Contains(body, name) {
				t.Errorf("pod %s metrics lack %s", tt.name, name)
			}
		}
	}

	cz := channelzpb.NewChannelzClient(cc)
	servers, err := cz.GetServers(ctx, &channelzpb.GetServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var mine *channelzpb.Server
	for _, s := range servers.Server {
		for _, ls := range s.ListenSocket {
			sock, err := cz.GetSocket(ctx, &channelzpb.GetSocketRequest{SocketId: ls.SocketId})
			if err != nil {
				t.Fatal(err)
			}
			if tcp := sock.Socket.GetLocal().GetTcpipAddress(); tcp != nil && netip.AddrPortFrom(netip.AddrFrom4([4]byte(tcp.IpAddress)), uint16(tcp.Port)) == netip.MustParseAddrPort(a.Addr().String()) {
				mine = s
			}
		}
	}
	if mine == nil {
		t.Fatalf("channelz lists no server listening on %s", a.Addr())
	}
	// The three GetPrice calls and the health check; the channelz calls
	// themselves are counted as they start.
	if got := mine.Data.CallsSucceeded; got < 4 {
		t.Errorf("channelz: pod a's server succeeded %d calls, want at least 4", got)
	}
}

// TestPodOTelMetrics: a pod with Metrics otel exports grpc-go's
// OpenTelemetry metrics through the OpenTelemetry Prometheus exporter,
// under the names the otel family of pinlab diagnose queries, for its own
// calls; an unknown family is Start's error.
func TestPodOTelMetrics(t *testing.T) {
	p := podtest.Start(t, pod.Config{Name: "o", Namespace: "shop", Addr: netip.MustParseAddrPort("127.203.201.3:0"), MetricsAddr: netip.MustParseAddrPort("127.203.201.3:0"), Metrics: pod.MetricsOTel})
	cc := podtest.Dial(t, p.Addr().String(), netip.MustParseAddr("127.203.201.9"))
	for range 3 {
		if _, err := pricingv1.NewPricingClient(cc).GetPrice(context.Background(), &pricingv1.GetPriceRequest{Sku: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	body := scrape(t, fmt.Sprintf("http://%s%s", p.MetricsAddr(), pod.MetricsPath))
	for _, re := range []string{
		`(?m)^grpc_server_call_started_total\{[^}]*grpc_method="pricing\.v1\.Pricing/GetPrice"[^}]*\} 3$`,
		`(?m)^grpc_server_call_duration_seconds_count\{[^}]*grpc_method="pricing\.v1\.Pricing/GetPrice"[^}]*grpc_status="OK"[^}]*\} 3$`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("metrics do not match %s:\n%s", re, body)
		}
	}
	if strings.Contains(body, "grpc_server_handled_total") {
		t.Errorf("otel metrics include go-grpc's:\n%s", body)
	}
	bad := pod.New(pod.Config{Name: "x", Addr: netip.MustParseAddrPort("127.203.201.4:0"), Metrics: "statsd"})
	if err := bad.Start(context.Background()); err == nil || !strings.Contains(err.Error(), `family "statsd"`) {
		t.Errorf("Start with metrics statsd: %v, want an error naming the family", err)
	}
}
