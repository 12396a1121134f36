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
	"google.golang.org/grpc"
)

// MetricsPath is where a pod's metrics server answers, as Prometheus
// scrapes by default.
const MetricsPath = "/metrics"

// metrics is a pod's Prometheus instrumentation: the grpc-ecosystem
// go-grpc-middleware v2 server metrics (grpc_server_started_total,
// grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code},
// grpc_server_msg_received_total, grpc_server_msg_sent_total and the
// grpc_server_handling_seconds histogram) in a registry of the pod's own,
// since many pods run in one process and each must report only its calls,
// as a process of its own would. The Go runtime and process collectors are
// left out for the same reason: every pod would report the same process.
type metrics struct {
	server *grpcprom.ServerMetrics
	reg    *prometheus.Registry
}

func newMetrics() *metrics {
	m := &metrics{server: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()), reg: prometheus.NewRegistry()}
	m.reg.MustRegister(m.server)
	return m
}

// serverOptions returns the interceptors that count calls.
func (m *metrics) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.server.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.server.StreamServerInterceptor()),
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
