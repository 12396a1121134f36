// Command kubernetes-resolver is a gRPC client on resolver/kubernetes: it
// dials a kubernetes:/// target with round_robin, calls the standard
// health service (grpc.health.v1.Health/Check) on it every interval, and
// prints which pod address served each call, or why it failed. Run it in a
// pod (the service account's token; RBAC below) or outside a cluster with a
// kubeconfig:
//
//	go run . -target kubernetes:///pricing.shop:grpc                  # in a pod
//	go run . -kubeconfig ~/.kube/config -target kubernetes://shop/pricing:grpc
//
// The pod's service account needs get, list and watch on
// endpointslices.discovery.k8s.io in the Service's namespace (get on
// services lets the resolver tell a missing Service from an empty one).
// Outside a cluster, pod IPs must be routable from where it runs (a kind or
// minikube node, a VPN into the cluster network).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	kuberesolver "github.com/pinlab/pinlab/resolver/kubernetes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

func main() {
	var c config
	flag.StringVar(&c.target, "target", "kubernetes:///pricing.shop:grpc", "the Service to call: kubernetes:///service.namespace:port or kubernetes://namespace/service:port (port by name or number)")
	kubeconfig := flag.String("kubeconfig", "", "a kubeconfig file, for use outside a cluster; empty: the pod's service account, else kubectl's default ($KUBECONFIG, ~/.kube/config)")
	flag.IntVar(&c.calls, "calls", 0, "calls to make; 0: until interrupted")
	flag.DurationVar(&c.interval, "interval", time.Second, "time between calls")
	flag.Parse()

	var opts []kuberesolver.Option
	if *kubeconfig != "" {
		opts = append(opts, kuberesolver.WithKubeconfig(*kubeconfig))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, c, opts...); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "kubernetes-resolver:", err)
		os.Exit(1)
	}
}

// config is what the flags set.
type config struct {
	target   string
	calls    int           // 0: until ctx ends
	interval time.Duration // between calls
}

// run makes c.calls health checks on c.target through a resolver built
// with opts, one line each on w, and returns when they are done or ctx
// ends (then ctx's error). A failed call is printed, not returned: the
// resolver's errors (no ready endpoint, RBAC 403, ...) show up as the
// calls' errors.
func run(ctx context.Context, w io.Writer, c config, opts ...kuberesolver.Option) error {
	opts = append([]kuberesolver.Option{kuberesolver.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)))}, opts...)
	conn, err := grpc.NewClient(c.target,
		grpc.WithResolvers(kuberesolver.NewBuilder(opts...)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for i := 0; c.calls == 0 || i < c.calls; i++ {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var p peer.Peer
		_, err := health.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			fmt.Fprintf(w, "call %d: %v\n", i+1, err)
		default:
			fmt.Fprintf(w, "call %d: served by %v\n", i+1, p.Addr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
