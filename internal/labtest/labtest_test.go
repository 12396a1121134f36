package labtest_test

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"go.uber.org/goleak"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPoll(t *testing.T) {
	var n atomic.Int32
	if err := labtest.Poll(labtest.Context(t, 10*time.Second), time.Millisecond, func() bool { return n.Add(1) == 3 }); err != nil {
		t.Errorf("Poll of a condition that comes true: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := labtest.Poll(ctx, time.Millisecond, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Errorf("Poll after its ctx ended: %v, want context.Canceled", err)
	}
}

func TestRun(t *testing.T) {
	stopped := errors.New("stopped")
	stop := labtest.Run(t, func(ctx context.Context) error {
		<-ctx.Done()
		return stopped
	})
	for range 2 {
		if err := stop(); !errors.Is(err, stopped) {
			t.Errorf("stop() = %v, want run's error", err)
		}
	}
}

// TestAPI: what the API publishes reaches the informers a component asked
// for before Start.
func TestAPI(t *testing.T) {
	api := labtest.NewAPI(t)
	slices := api.Factory.Discovery().V1().EndpointSlices().Lister()
	api.Start()
	ep := labtest.Endpoint("shop", "pricing-0", netip.MustParseAddr("127.0.0.2"), labtest.Ready)
	for _, port := range []uint16{8471, 8472} {
		api.ApplySlice(labtest.Slice("shop", "pricing-a", "pricing", []discovery.EndpointPort{labtest.SlicePort("grpc", port)}, ep))
		labtest.WaitFor(t, 10*time.Second, "the slice in the informer cache", func() bool {
			got, err := slices.List(labels.Everything())
			return err == nil && len(got) == 1 && *got[0].Ports[0].Port == int32(port)
		})
	}
	api.ApplyService(labtest.Service("shop", "pricing", "127.96.0.1", labtest.ServicePort("grpc", 8471)))
	api.DeleteService("shop", "pricing")
}
