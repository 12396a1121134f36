// Package pod is the workload that runs inside every lab pod: a real grpc-go
// server for pricing.v1.Pricing plus the standard grpc.health.v1 service,
// with grpc-go's MaxConnectionAge settings taken from the pod's args. Each
// reply names the pod (name and IP) that served it.
package pod

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"sync"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Observer receives what a pod serves, for per-pod reports. Calls come from
// grpc-go's transport goroutines, concurrently; implementations must be safe
// for concurrent use and quick.
type Observer interface {
	// Served reports one finished call of method from peer.
	Served(peer netip.AddrPort, method string, code codes.Code)
	// Conn reports a connection from peer opening (open true) or closing.
	Conn(peer netip.AddrPort, open bool)
}

// Config describes one pod's server.
type Config struct {
	// Name and Namespace identify the pod in replies.
	Name, Namespace string
	// Addr is the pod IP and port to listen on; it must be inside 127.0.0.0/8.
	Addr netip.AddrPort
	// MaxConnectionAge and MaxConnectionAgeGrace are passed to grpc-go's
	// keepalive.ServerParameters; zero means infinity, as in grpc-go.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// Observer, if not nil, is told about calls and connections.
	Observer Observer
}

// Server is one running pod workload. Start it once; Stop or Kill it once.
type Server struct {
	cfg    Config
	grpc   *grpc.Server
	health *health.Server

	ln       net.Listener
	wg       sync.WaitGroup
	serveErr error
}

// New returns a server for cfg; nothing listens until Start.
func New(cfg Config) *Server {
	opts := []grpc.ServerOption{
		grpc.StatsHandler(&connObserver{obs: cfg.Observer}),
	}
	if cfg.MaxConnectionAge > 0 || cfg.MaxConnectionAgeGrace > 0 {
		kp := keepalive.ServerParameters{
			MaxConnectionAge:      cfg.MaxConnectionAge,
			MaxConnectionAgeGrace: cfg.MaxConnectionAgeGrace,
		}
		opts = append(opts, grpc.KeepaliveParams(kp))
	}
	s := &Server{cfg: cfg, grpc: grpc.NewServer(opts...), health: health.NewServer()}
	pricingv1.RegisterPricingServer(s.grpc, &pricing{cfg: cfg})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus(pricingv1.Pricing_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// Start listens on cfg.Addr and serves in a background goroutine owned by s.
// It returns once the listener is bound.
func (s *Server) Start(ctx context.Context) error {
	ln, err := loopback.Listen(ctx, s.cfg.Addr.String())
	if err != nil {
		return fmt.Errorf("pod %s: %w", s.cfg.Name, err)
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.serveErr = err
		}
	}()
	return nil
}

// Addr returns the bound address once Start succeeded.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stop shuts down gracefully as a pod does on SIGTERM with grpc-go's
// GracefulStop: health turns NOT_SERVING, the listener closes, every
// connection gets GOAWAY and in-flight calls may finish. When ctx ends first
// (the termination grace period), remaining connections are closed hard and
// their calls fail. Stop blocks until the server has stopped.
func (s *Server) Stop(ctx context.Context) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
	s.wg.Wait()
	return s.serveErr
}

// Kill stops at once: listener and connections close and in-flight calls
// fail, as when the grace period is zero.
func (s *Server) Kill() {
	s.grpc.Stop()
	s.wg.Wait()
}

type pricing struct {
	pricingv1.UnimplementedPricingServer
	cfg Config
}

func (p *pricing) GetPrice(_ context.Context, req *pricingv1.GetPriceRequest) (*pricingv1.GetPriceResponse, error) {
	return p.quote(req.GetSku(), 0), nil
}

func (p *pricing) WatchPrices(req *pricingv1.WatchPricesRequest, stream grpc.ServerStreamingServer[pricingv1.GetPriceResponse]) error {
	interval := time.Duration(req.GetIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for seq := int64(1); req.GetCount() == 0 || seq <= req.GetCount(); seq++ {
		if err := stream.Send(p.quote(req.GetSku(), seq)); err != nil {
			return err
		}
		if req.GetCount() != 0 && seq == req.GetCount() {
			break
		}
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-t.C:
		}
	}
	return nil
}

func (p *pricing) quote(sku string, seq int64) *pricingv1.GetPriceResponse {
	h := fnv.New32a()
	h.Write([]byte(sku))
	return &pricingv1.GetPriceResponse{
		Sku:        sku,
		PriceCents: 100 + int64(h.Sum32()%99900),
		Pod:        p.cfg.Name,
		PodIp:      p.cfg.Addr.Addr().String(),
		Namespace:  p.cfg.Namespace,
		Seq:        seq,
	}
}
