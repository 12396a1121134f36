package kubetier

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
)

// BenchmarkPortForward compares gRPC calls to a pod through kubectl
// port-forward (kubectl, the API server, the node's kubelet API, the
// pod's namespace) with calls to the pod's address from the lab's
// namespace, measured side by side in one run:
//
//   - latency: one call each way per op, alternated, on one connection
//     each; reports each path's time per call and forward/direct;
//
//   - throughput: per op, 8 goroutines make 50 calls each way on one
//     connection each (the forward multiplexes them on one stream, as any
//     gRPC client through a forward does); reports calls/s each way and
//     forward/direct.
//
//     go test -run '^$' -bench PortForward -benchtime 2000x ./internal/kubetier
func BenchmarkPortForward(b *testing.B) {
	ns := "pfbench"
	ctx := setUp(b, ns, 1)
	names, _ := readyPods(b, ctx, ns)
	p, err := theLab.Cluster.Client().CoreV1().Pods(ns).Get(ctx, names[0], metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	local, _ := portForward(b, ctx, ns, names[0])
	dial := func(addr string) pricingv1.PricingClient {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		return pricingv1.NewPricingClient(conn)
	}
	paths := []pricingv1.PricingClient{dial(local), dial(p.Status.PodIP + ":8471")}
	call := func(c pricingv1.PricingClient) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := c.GetPrice(cctx, &pricingv1.GetPriceRequest{Sku: "bench"})
		return err
	}
	for range 50 { // connect and warm both
		for _, c := range paths {
			if err := call(c); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("latency", func(b *testing.B) {
		var took [2]time.Duration
		for b.Loop() {
			for i, c := range paths {
				t0 := time.Now()
				if err := call(c); err != nil {
					b.Fatal(err)
				}
				took[i] += time.Since(t0)
			}
		}
		b.ReportMetric(float64(took[0].Microseconds())/float64(b.N), "us/forwarded-call")
		b.ReportMetric(float64(took[1].Microseconds())/float64(b.N), "us/direct-call")
		b.ReportMetric(float64(took[0])/float64(took[1]), "forward/direct")
	})
	b.Run("throughput", func(b *testing.B) {
		var took [2]time.Duration
		const workers, calls = 8, 50
		for b.Loop() {
			for i, c := range paths {
				t0 := time.Now()
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for range calls {
							if err := call(c); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				took[i] += time.Since(t0)
			}
		}
		n := float64(b.N * workers * calls)
		b.ReportMetric(n/took[0].Seconds(), "forwarded-calls/s")
		b.ReportMetric(n/took[1].Seconds(), "direct-calls/s")
		b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "forward/direct-rate")
	})
}
