package pod

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	otelgrpc "google.golang.org/grpc/stats/opentelemetry"
)

// MetricsPath is where a pod's metrics server answers, as Prometheus
// scrapes by default.
const MetricsPath = "/metrics"

// Metrics families a pod can export (Config.Metrics, pod arg --metrics).
const (
	// MetricsGoGRPC is the grpc-ecosystem go-grpc-middleware v2 server
	// metrics: grpc_server_started_total, grpc_server_handled_total{
	// grpc_type,grpc_service,grpc_method,grpc_code},
	// grpc_server_msg_received_total, grpc_server_msg_sent_total and the
	// grpc_server_handling_seconds histogram. The default.
	MetricsGoGRPC = "go-grpc" // workload.MetricsFamilies[0]
	// MetricsOTel is grpc-go's OpenTelemetry plugin (stats/opentelemetry,
	// gRFC A66: grpc.server.call.started, grpc.server.call.duration and the
	// message sizes, by grpc.method and grpc.status) through the
	// OpenTelemetry SDK and its Prometheus exporter, which names them
	// grpc_server_call_started_total, grpc_server_call_duration_seconds and
	// so on.
	MetricsOTel = "otel"
)

// metrics is a pod's Prometheus instrumentation, of one family (see
// MetricsGoGRPC and MetricsOTel), in a registry of the pod's own, since
// many pods run in one process and each must report only its calls, as a
// process of its own would. The Go runtime and process collectors are
// left out for the same reason: every pod would report the same process.
type metrics struct {
	server *grpcprom.ServerMetrics // go-grpc's; nil for otel
	otel   *sdkmetric.MeterProvider
	reg    *prometheus.Registry
}

// newMetrics returns the instrumentation of family (empty: go-grpc).
func newMetrics(family string) (*metrics, error) {
	m := &metrics{reg: prometheus.NewRegistry()}
	switch family {
	case "", MetricsGoGRPC:
		m.server = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
		m.reg.MustRegister(m.server)
	case MetricsOTel:
		exp, err := otelprom.New(otelprom.WithRegisterer(m.reg))
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		m.otel = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	default:
		return nil, fmt.Errorf("metrics: family %q: want %s or %s", family, MetricsGoGRPC, MetricsOTel)
	}
	return m, nil
}

// serverOptions returns what counts the server's calls: go-grpc's
// interceptors, or grpc-go's OpenTelemetry stats handler.
func (m *metrics) serverOptions() []grpc.ServerOption {
	if m.otel != nil {
		return []grpc.ServerOption{otelgrpc.ServerOption(otelgrpc.Options{MetricsOptions: otelgrpc.MetricsOptions{MeterProvider: m.otel}})}
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.server.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.server.StreamServerInterceptor()),
	}
}

// initialize gives go-grpc's counters a zero series for each of srv's
// methods, as grpc-ecosystem's InitializeMetrics.
func (m *metrics) initialize(srv *grpc.Server) {
	if m.server != nil {
		m.server.InitializeMetrics(srv)
	}
}

// metricsServer serves a registry over HTTP (GET /metrics, the text
// exposition format through promhttp) on a pod's metrics address. Start
// once; Close any number of times.
type metricsServer struct {
	http *http.Server
	addr net.Addr // the bound address
	wg   sync.WaitGroup
	once sync.Once
}

// startMetrics listens on addr (inside the ranges package loopback allows)
// in namespace ns (nil: the node's) and serves reg in a goroutine that
// Close waits for.
func startMetrics(ctx context.Context, ns Netns, addr netip.AddrPort, reg *prometheus.Registry) (*metricsServer, error) {
	ln, err := listenIn(ctx, ns, addr.String())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s := &metricsServer{http: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}, addr: ln.Addr()}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			return // the listener failed; scrapes see a refused port, as of a crashed exporter
		}
	}()
	return s, nil
}

// Close stops the server at once (a scrape in progress is cut) and waits
// for its goroutine. A nil server does nothing.
func (s *metricsServer) Close() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		s.http.Close()
		s.wg.Wait()
	})
}
