package kubernetes

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// server is a gRPC server on 127.0.0.1:0 that counts the calls it serves.
type server struct {
	addr  *net.TCPAddr
	calls atomic.Int64
}

func startServer(t *testing.T) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: lis.Addr().(*net.TCPAddr)}
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return s
}

// TestChannel: a channel on the resolver calls the Service's pods (each
// slice maps the port name to its pod's port; round_robin calls every
// one); when no endpoint is ready its calls fail at once, without dead
// addresses, pick_first's with the resolver's reason (grpc-go 1.85's
// round_robin drops resolver errors when it has no endpoint, and says "no
// children to pick from"); and it recovers when they are ready again.
func TestChannel(t *testing.T) {
	tests := []struct {
		policy, fails string
		every         bool // calls reach every pod
	}{
		{policy: "round_robin", fails: "no children to pick from", every: true},
		{policy: "pick_first", fails: "name resolver error: kubernetes resolver: Service shop/pricing has no ready endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			client, watched := apiClient()
			var servers []*server
			var eps []*discoveryv1.EndpointSlice
			for _, name := range []string{"pricing-a", "pricing-b", "pricing-c"} {
				s := startServer(t)
				servers = append(servers, s)
				eps = append(eps, slice("pricing", name, int32(s.addr.Port), "127.0.0.1"))
				create(t, client, eps[len(eps)-1])
			}
			conn, err := grpc.NewClient("kubernetes:///pricing.shop:grpc",
				grpc.WithResolvers(NewBuilder(WithClient(client), WithLogger(nil))),
				grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+tt.policy+`":{}}]}`),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			hc := healthpb.NewHealthClient(conn)
			call := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
				return err
			}
			served := func() bool {
				n := 0
				for _, s := range servers {
					if s.calls.Load() > 0 {
						n++
					}
				}
				return n == len(servers) || !tt.every && n > 0
			}
			waitCalls := func(what string) {
				t.Helper()
				deadline := time.Now().Add(waitTimeout)
				for !served() {
					if err := call(); err != nil {
						t.Logf("call: %v", err)
					}
					if time.Now().After(deadline) {
						t.Fatalf("timed out waiting for %s", what)
					}
				}
			}
			waitCalls("calls on the pods")
			waitWatch(t, watched)

			for _, s := range eps {
				down := s.DeepCopy()
				down.Endpoints[0].Conditions = conditions(false, false, false)
				update(t, client, down)
			}
			deadline := time.Now().Add(waitTimeout)
			for {
				err := call()
				if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), tt.fails) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("calls did not fail saying %q; last: %v", tt.fails, err)
				}
			}

			for _, s := range servers {
				s.calls.Store(0)
			}
			for _, s := range eps {
				update(t, client, s)
			}
			waitCalls("calls on the pods after they were ready again")
		})
	}
}
