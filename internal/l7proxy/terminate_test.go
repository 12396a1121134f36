package l7proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/plan"
)

// streamLen and streamIntervalMs shape the streams of loadGen: each lasts
// about 400ms, so one is in flight on a pod when it starts terminating.
const (
	streamLen        = 8
	streamIntervalMs = 50
)

// loadGen drives unary calls and WatchPrices streams through one channel
// until stopped, recording errors and, for calls issued after cut, which pod
// served them. Calls in flight when it stops run to their end.
type loadGen struct {
	t      *testing.T
	ctx    context.Context
	stopFn context.CancelFunc
	wg     sync.WaitGroup
	cutAt  atomic.Bool

	mu        sync.Mutex
	errs      []error
	afterCut  map[string]int // calls issued after cut, by pod
	streaming map[string]int // streams in flight, by pod
	short     []int          // message counts of streams that ended early
}

func startLoad(t *testing.T, c pricingv1.PricingClient, unary, streams int) *loadGen {
	ctx, stop := context.WithCancel(context.Background())
	g := &loadGen{t: t, ctx: ctx, stopFn: stop, afterCut: map[string]int{}, streaming: map[string]int{}}
	for range unary {
		g.wg.Go(func() { g.unary(c) })
	}
	for range streams {
		g.wg.Go(func() { g.stream(c) })
	}
	t.Cleanup(g.stop)
	return g
}

func (g *loadGen) unary(c pricingv1.PricingClient) {
	for g.ctx.Err() == nil {
		cut := g.cutAt.Load()
		resp, err := call(c, "sku")
		g.mu.Lock()
		if err != nil {
			g.errs = append(g.errs, fmt.Errorf("GetPrice: %w", err))
		} else if cut {
			g.afterCut[resp.GetPod()]++
		}
		g.mu.Unlock()
	}
}

func (g *loadGen) stream(c pricingv1.PricingClient) {
	for g.ctx.Err() == nil {
		cut := g.cutAt.Load()
		if err := g.oneStream(c, cut); err != nil {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
		}
	}
}

// oneStream runs one WatchPrices stream to its end.
func (g *loadGen) oneStream(c pricingv1.PricingClient, cut bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	s, err := c.WatchPrices(ctx, &pricingv1.WatchPricesRequest{Sku: "s", IntervalMs: streamIntervalMs, Count: streamLen})
	if err != nil {
		return fmt.Errorf("WatchPrices: %w", err)
	}
	podName, n := "", 0
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if podName != "" {
			g.streaming[podName]--
		}
		if n != streamLen {
			g.short = append(g.short, n)
		}
	}()
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("WatchPrices from %q after %d messages: %w", podName, n, err)
		}
		if n++; n == 1 {
			podName = m.GetPod()
			g.mu.Lock()
			g.streaming[podName]++
			if cut {
				g.afterCut[podName]++
			}
			g.mu.Unlock()
		}
	}
}

// cut marks the calls issued from now on as checked.
func (g *loadGen) cut() { g.cutAt.Store(true) }

func (g *loadGen) streamsOn(pod string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.streaming[pod]
}

func (g *loadGen) totalAfterCut() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, v := range g.afterCut {
		n += v
	}
	return n
}

// stop ends the load and waits for the calls in flight. Idempotent.
func (g *loadGen) stop() {
	g.stopFn()
	g.wg.Wait()
}

// TestTerminatingPodLosesNoCalls: a pod terminates gracefully under load
// (its endpoint turns terminating, grpc-go GracefulStop sends GOAWAY and
// lets in-flight calls finish), in either order, as the EndpointSlice
// controller and the kubelet race in a cluster. No call fails: streams in
// flight on the pod complete, calls sent to it after its listener closed are
// refused before reaching it and go elsewhere, and no call issued after the
// proxy dropped the endpoint reaches it.
func TestTerminatingPodLosesNoCalls(t *testing.T) {
	orders := []string{"slice first", "stop first"}
	n := 0
	for _, policy := range plan.ProxyPolicies {
		for _, order := range orders {
			n++
			t.Run(policy+"/"+order, func(t *testing.T) {
				l := newLab(t, Config{Policy: policy})
				bs := l.pods(3, 130+3*n)
				victim, rest := bs[0], bs[1:]
				l.ready(bs...)
				g := startLoad(t, l.client(), 6, 3)
				l.waitFor("a stream in flight on "+victim.name, func() bool { return g.streamsOn(victim.name) > 0 })

				stopped := make(chan error, 1)
				stop := func() {
					go func() { stopped <- victim.pod.Stop(l.ctx()) }()
				}
				if order == "stop first" {
					stop()
					if err := <-stopped; err != nil {
						t.Fatalf("graceful stop: %v", err)
					}
				}
				l.setEndpoint(victim, labtest.ServingTerminating)
				l.waitTable(rest...)
				g.cut()
				l.waitFor("200 calls after the cut", func() bool { return g.totalAfterCut() >= 200 })
				if order == "slice first" {
					t.Logf("streams in flight on %s when it stops: %d", victim.name, g.streamsOn(victim.name))
					stop()
					if err := <-stopped; err != nil {
						t.Fatalf("graceful stop: %v", err)
					}
				}
				g.stop()

				for _, err := range g.errs {
					t.Errorf("failed call: %v", err)
				}
				if len(g.short) > 0 {
					t.Errorf("streams that ended early, message counts %v", g.short)
				}
				if n := g.afterCut[victim.name]; n != 0 {
					t.Errorf("%d calls issued after the proxy dropped %s reached it; after-cut calls per pod %v", n, victim.name, g.afterCut)
				}
				retried := 0
				for _, c := range l.obs.callsSnapshot() {
					if c.Attempts > 1 {
						retried++
					}
				}
				t.Logf("after-cut calls per pod %v; %d calls retried on another endpoint", g.afterCut, retried)
			})
		}
	}
}
