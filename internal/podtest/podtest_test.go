package podtest_test

import (
	"net/netip"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRecorder: a pod started with Start reports its calls and connections
// to a Recorder, which counts them by route, code and peer.
func TestRecorder(t *testing.T) {
	const getPrice = "/pricing.v1.Pricing/GetPrice"
	rec := &podtest.Recorder{}
	s := podtest.Start(t, pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.203.210.1:0"), Observer: rec})
	source := netip.MustParseAddr("127.203.210.9")
	c := pricingv1.NewPricingClient(podtest.Dial(t, s.Addr().String(), source))
	for range 2 {
		if _, err := c.GetPrice(labtest.Context(t, 10*time.Second), &pricingv1.GetPriceRequest{Sku: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	labtest.WaitFor(t, 10*time.Second, "2 calls recorded", func() bool { return rec.Count(getPrice, codes.OK) == 2 })
	if n := rec.Count("", codes.OK); n != 2 || rec.Total() != 2 {
		t.Errorf("Count(\"\", OK) = %d, Total() = %d; want 2 and 2 (%v)", n, rec.Total(), rec)
	}
	if peers := rec.Peers(getPrice); len(peers) != 2 || peers[0] != source {
		t.Errorf("Peers = %v, want 2 calls from %v", peers, source)
	}
	if opened, _ := rec.ConnsFrom(source); opened != 1 {
		t.Errorf("ConnsFrom(%v) opened %d, want 1", source, opened)
	}
	if got := podtest.Connect(s.Addr().String()); got != "connected" {
		t.Errorf("Connect to a running pod: %s", got)
	}
	s.Kill()
	if got := podtest.Connect(s.Addr().String()); got != "refused" {
		t.Errorf("Connect to a killed pod: %s, want refused", got)
	}
}
