package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

// BenchmarkGeneratorVsGhz puts pinlab's load generator beside ghz on one
// direct path: both drive GetPrice at 2000 calls/s for 5 s against the
// same pod, in interleaved rounds, and the benchmark reports each one's
// median p50 latency and their ratio (pinlab / ghz). Latency is from the
// call's due time for pinlab (so schedule lag counts) and from the send for
// ghz. It runs only with PINLAB_GHZ set to a ghz binary; bench/ghz.sh
// installs ghz and runs it:
//
//	bench/ghz.sh
func BenchmarkGeneratorVsGhz(b *testing.B) {
	ghz := os.Getenv("PINLAB_GHZ")
	if ghz == "" {
		b.Skip("set PINLAB_GHZ to a ghz binary (bench/ghz.sh does)")
	}
	_, file, _, _ := runtime.Caller(0)
	proto := filepath.Join(filepath.Dir(file), "..", "..", "api", "pricing", "v1", "pricing.proto")
	s := podtest.Start(b, pod.Config{Name: "bench", Addr: netip.MustParseAddrPort("127.203.81.1:0")})
	addr := loopback.AddrPort(s.Addr())
	const rounds, rate, d = 5, 2000, 5 * time.Second
	var ours, theirs []time.Duration
	for range b.N {
		for r := range rounds {
			theirs = append(theirs, ghzP50(b, ghz, proto, addr, rate, d))
			rs, _ := generate(&testing.T{}, addr, fmt.Sprintf("127.203.81.%d", 10+r), rate, d, nil)
			ours = append(ours, rs[len(rs)/2].Latency)
		}
	}
	slices.Sort(ours)
	slices.Sort(theirs)
	o, g := ours[len(ours)/2], theirs[len(theirs)/2]
	b.ReportMetric(float64(o.Microseconds()), "pinlab-p50-us")
	b.ReportMetric(float64(g.Microseconds()), "ghz-p50-us")
	b.ReportMetric(float64(o)/float64(g), "ratio")
}

// ghzP50 runs ghz against addr and returns its p50 latency.
func ghzP50(b *testing.B, ghz, proto string, addr netip.AddrPort, rate int, d time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ghz, "--insecure", "--proto", proto, "--call", "pricing.v1.Pricing.GetPrice",
		"-d", `{"sku":"a"}`, "--rps", fmt.Sprint(rate), "-z", d.String(), "-c", "20", "--connections", "1",
		"-O", "json", addr.String()).Output()
	if err != nil {
		b.Fatalf("ghz: %v", err)
	}
	var rep struct {
		LatencyDistribution []struct {
			Percentage int   `json:"percentage"`
			Latency    int64 `json:"latency"`
		} `json:"latencyDistribution"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		b.Fatalf("ghz output: %v", err)
	}
	for _, l := range rep.LatencyDistribution {
		if l.Percentage == 50 {
			return time.Duration(l.Latency)
		}
	}
	b.Fatal("ghz reported no p50")
	return 0
}
