package stats

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
)

// TestSummarize feeds a known history: pod a ready before start, pod b added
// at 2s; client c sends 10 calls/s to a for 4s and, from 2s, 10 calls/s to b.
func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r := NewRecorder(t0)
	ipC := netip.MustParseAddr("127.244.0.50")
	r.Client("c", ipC)
	r.Node(netip.MustParseAddr("127.0.0.1"))
	r.PodPhase("a", "127.244.0.2", PodCreated, at(-2*time.Second))
	r.PodPhase("a", "127.244.0.2", PodReady, at(-time.Second))
	r.PodPhase("b", "127.244.0.3", PodCreated, at(1500*time.Millisecond))
	r.PodPhase("b", "127.244.0.3", PodReady, at(2*time.Second))
	r.PodPhase("idle", "127.244.0.4", PodReady, at(-time.Second))
	peer := netip.AddrPortFrom(ipC, 40000)
	r.PodConn("a", peer, true, at(0))
	r.PodConn("a", netip.MustParseAddrPort("127.0.0.1:5555"), true, at(0)) // a probe: not counted
	r.ClientConn("c", netip.MustParseAddrPort("127.244.0.2:8471"), true, at(0))
	r.PodConn("b", netip.AddrPortFrom(ipC, 40001), true, at(2*time.Second))
	r.ClientConn("c", netip.MustParseAddrPort("127.244.0.3:8471"), true, at(2*time.Second))
	for i := range 40 {
		d := time.Duration(i) * 100 * time.Millisecond
		r.Served("a", ipC, at(d))
		r.Call("c", "a", codes.OK, "", time.Millisecond, at(d))
		if d >= 2*time.Second {
			r.Served("b", ipC, at(d))
			r.Call("c", "b", codes.OK, "", 3*time.Millisecond, at(d))
		}
	}
	r.Served("a", netip.MustParseAddr("127.0.0.1"), at(time.Second)) // kubelet: not counted
	r.Call("c", "", codes.Unavailable, "refused", time.Second, at(3*time.Second))

	s := r.Summarize([]Window{{Name: "before", From: 0, To: 2 * time.Second}, {Name: "after", From: 2 * time.Second, To: 4 * time.Second}}, 4*time.Second)
	type row struct {
		Name   string
		Calls  int64
		Rate   float64
		Added  bool
		Idle   bool
		Conns  float64
		Client int64
	}
	rows := func(w WindowStats) []row {
		var out []row
		for _, p := range w.Pods {
			out = append(out, row{p.Name, p.Calls, math.Round(p.Rate*10) / 10, p.Added, p.Idle, math.Round(p.Conns*100) / 100, p.ByClient["c"]})
		}
		return out
	}
	want := map[string][]row{
		"before": {{"a", 20, 10, false, false, 1, 20}, {"idle", 0, 0, false, true, 0, 0}},
		"after":  {{"a", 20, 10, false, false, 1, 20}, {"b", 20, 10, true, false, 1, 20}, {"idle", 0, 0, false, true, 0, 0}},
	}
	for _, w := range s.Windows {
		if diff := cmp.Diff(want[w.Name], rows(w)); diff != "" {
			t.Errorf("window %s pods (-want +got):\n%s", w.Name, diff)
		}
	}
	after := s.Windows[1]
	if after.AddedPods != 1 || math.Abs(after.AddedShare-0.5) > 1e-9 || after.Idle != 1 {
		t.Errorf("after: added %d share %.2f idle %d; want 1, 0.50, 1", after.AddedPods, after.AddedShare, after.Idle)
	}
	if after.ConnsPerClient != 2 || after.Errors["Unavailable"] != 1 || after.ClientOK != 40 {
		t.Errorf("after: conns/client %.2f errors %v ok %d; want 2, Unavailable 1, 40", after.ConnsPerClient, after.Errors, after.ClientOK)
	}
	// Failed calls count in latency too: the one 1s failure is the p99.
	if p50, p99 := after.LatencyP50, after.LatencyP99; p50 < 0.9 || p50 > 3.1 || p99 < 990 || p99 > 1010 {
		t.Errorf("after: p50 %.2fms p99 %.2fms, want 1-3ms and about 1000ms", p50, p99)
	}
	if got := s.Timeline["b"]; len(got) != 4 || got[2] != 10 || got[1] != 0 {
		t.Errorf("timeline of b = %v, want [0 0 10 10]", got)
	}
	if c := s.Clients[0]; c.OK != 60 || c.ByPod["b"] != 20 || c.Errors["Unavailable"] != 1 {
		t.Errorf("client stats %+v", c)
	}
}
