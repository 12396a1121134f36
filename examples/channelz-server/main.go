// Command channelz-server is a gRPC server written with plain grpc-go,
// nothing of pinlab's: it serves the standard health service
// (grpc.health.v1.Health, the service its clients call) and grpc-go's
// channelz service (google.golang.org/grpc/channelz/service) on one port.
// Those two registrations are all a grpc-go service needs for `pinlab
// diagnose` to read its per-pod call counts and client connections;
// grpc-java (ChannelzService) and C-core (grpc::channelz::experimental)
// servers have the same service.
//
//	go run . -listen 127.0.0.1:50051
//
// Run one per pod; `pinlab diagnose SERVICE -n NS --kubeconfig FILE` then
// reads each pod's channelz at its pod IP and the Service's target port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	channelzsvc "google.golang.org/grpc/channelz/service"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:50051", "address to serve gRPC on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "channelz-server:", err)
		os.Exit(1)
	}
	fmt.Printf("serving grpc.health.v1.Health and grpc.channelz.v1.Channelz on %s\n", lis.Addr())
	if err := serve(ctx, lis); err != nil {
		fmt.Fprintln(os.Stderr, "channelz-server:", err)
		os.Exit(1)
	}
}

// newServer returns a gRPC server with the health and channelz services.
func newServer() *grpc.Server {
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer()) // "" is SERVING
	channelzsvc.RegisterChannelzServiceToServer(s)
	return s
}

// serve serves on lis until ctx ends, then stops gracefully (calls in
// flight finish) and returns nil; it closes lis.
func serve(ctx context.Context, lis net.Listener) error {
	s := newServer()
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		s.GracefulStop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	}
}
