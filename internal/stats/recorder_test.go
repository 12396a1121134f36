package stats

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
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
	r.Client(ClientInfo{Name: "c", Group: "c", IP: ipC})
	r.Node(netip.MustParseAddr("127.0.0.1"))
	r.PodPhase("a", "127.244.0.2", PodCreated, at(-2*time.Second))
	r.PodPhase("a", "127.244.0.2", PodReady, at(-time.Second))
	r.PodPhase("b", "127.244.0.3", PodCreated, at(1500*time.Millisecond))
	r.PodPhase("b", "127.244.0.3", PodReady, at(2*time.Second))
	r.PodPhase("idle", "127.244.0.4", PodReady, at(-time.Second))
	peer := netip.AddrPortFrom(ipC, 40000)
	r.PodConn("a", peer, true, at(0))
	r.PodConn("a", netip.MustParseAddrPort("127.0.0.1:5555"), true, at(0)) // a probe: not counted
	r.ClientConn("c", netip.MustParseAddrPort("127.244.0.2:8471"), true, "", at(0))
	r.PodConn("b", netip.AddrPortFrom(ipC, 40001), true, at(2*time.Second))
	r.ClientConn("c", netip.MustParseAddrPort("127.244.0.3:8471"), true, "", at(2*time.Second))
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

// TestConnectionsBeforeStart: connections opened while the lab started,
// before load (SetStart), keep their real offset, and count as open in
// every window (bug: offsets were taken from the recorder's creation).
func TestConnectionsBeforeStart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRecorder(t0) // created at setup
	ip := netip.MustParseAddr("127.244.0.50")
	r.Client(ClientInfo{Name: "c", Group: "c", IP: ip})
	r.PodPhase("a", "127.244.0.2", PodReady, t0.Add(time.Second))
	peer := netip.AddrPortFrom(ip, 40000)
	// The client connects at 6.8s after setup began, 30ms before load.
	r.PodConn("a", peer, true, t0.Add(6800*time.Millisecond))
	r.ClientConn("c", netip.MustParseAddrPort("127.244.0.2:8471"), true, "", t0.Add(6800*time.Millisecond))
	start := t0.Add(6830 * time.Millisecond)
	r.SetStart(start)
	for i := range 20 {
		at := start.Add(time.Duration(i) * 100 * time.Millisecond)
		r.Served("a", ip, at)
		r.Call("c", "a", codes.OK, "", time.Millisecond, at)
	}
	s := r.Summarize([]Window{{Name: "run", From: 0, To: 2 * time.Second}}, 2*time.Second)
	if got := s.Clients[0].OpenedAt; len(got) != 1 || got[0] != -0.03 {
		t.Errorf("conns_opened_at_s = %v, want [-0.03]", got)
	}
	if got := s.Clients[0].Conns; len(got) != 1 || got[0].Opened != Offset(-30*time.Millisecond) || got[0].Closed != nil {
		t.Errorf("conns = %+v, want one opened at -0.03s, still open", got)
	}
	w := s.Windows[0]
	if w.Pods[0].Conns != 1 || w.ConnsPerClient != 1 || w.ConnsOpened != 0 {
		t.Errorf("pod conns %.3f, conns/client %.3f, opened %d; want 1, 1, 0", w.Pods[0].Conns, w.ConnsPerClient, w.ConnsOpened)
	}
	if got := s.Pods[0].Phases[0].At; got != Offset(-5830*time.Millisecond) {
		t.Errorf("ready at %v, want -5.83s", got.Seconds())
	}
}

// TestPodState: each window shows the pod's state at its end and the
// changes inside it.
func TestPodState(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := NewRecorder(t0)
	ip := netip.MustParseAddr("127.244.0.50")
	r.Client(ClientInfo{Name: "c", Group: "c", IP: ip})
	for _, p := range []string{"a", "b", "c", "d"} {
		r.PodPhase(p, "", PodCreated, at(-2))
		r.PodPhase(p, "", PodReady, at(-1))
	}
	r.PodPhase("a", "", PodNotReady, at(5))    // not ready at 5s, stays so
	r.PodPhase("b", "", PodTerminating, at(3)) // deleted: terminating, then gone
	r.PodPhase("b", "", PodNotReady, at(3.5))
	r.PodPhase("b", "", PodDeleted, at(7))
	r.PodEvent("c", "restarted", at(6)) // a container restart
	r.PodPhase("c", "", PodNotReady, at(6))
	r.PodPhase("c", "", PodReady, at(6.5))
	for i := range 100 {
		d := at(float64(i) / 10)
		for _, p := range []string{"a", "b", "c", "d"} {
			r.Served(p, ip, d)
		}
	}
	s := r.Summarize([]Window{{Name: "early", From: 0, To: 2 * time.Second}, {Name: "mid", From: 2 * time.Second, To: 6 * time.Second}, {Name: "late", From: 8 * time.Second, To: 10 * time.Second}}, 10*time.Second)
	type row struct {
		Pod     string
		State   PodPhase
		Changes string
	}
	got := map[string][]row{}
	for _, w := range s.Windows {
		for _, p := range w.Pods {
			var ch []string
			for _, c := range p.Changes {
				ch = append(ch, fmt.Sprintf("%s@%g", c.Phase, c.At.Seconds()))
			}
			got[w.Name] = append(got[w.Name], row{p.Name, p.State, strings.Join(ch, " ")})
		}
	}
	want := map[string][]row{
		"early": {{"a", PodReady, ""}, {"b", PodReady, ""}, {"c", PodReady, ""}, {"d", PodReady, ""}},
		"mid": {{"a", PodNotReady, "not-ready@5"}, {"b", PodTerminating, "terminating@3 not-ready@3.5"},
			{"c", PodReady, ""}, {"d", PodReady, ""}},
		"late": {{"a", PodNotReady, ""}, {"b", PodDeleted, ""}, {"c", PodReady, ""}, {"d", PodReady, ""}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod states (-want +got):\n%s", diff)
	}
	// A pod killed at 3s that stays not ready and serves nothing is shown
	// apart in later windows, not dropped and not counted.
	r.PodPhase("e", "", PodCreated, at(-2))
	r.PodPhase("e", "", PodReady, at(-1))
	r.PodEvent("e", "killed", at(3))
	r.PodPhase("e", "", PodNotReady, at(3))
	s = r.Summarize([]Window{{Name: "late", From: 8 * time.Second, To: 10 * time.Second}}, 10*time.Second)
	if o := s.Windows[0].OtherPods; len(o) != 1 || o[0].Name != "e" || o[0].State != PodNotReady || len(s.Windows[0].Pods) != 4 {
		t.Errorf("late window: pods %d, other pods %+v; want 4 and e not ready", len(s.Windows[0].Pods), o)
	}
	// c restarted at 6s: in a window covering it.
	s = r.Summarize([]Window{{Name: "w", From: 5 * time.Second, To: 7 * time.Second}}, 10*time.Second)
	for _, p := range s.Windows[0].Pods {
		if p.Name == "c" && (len(p.Changes) != 3 || p.Changes[1].Phase != PodRestarted) {
			t.Errorf("c changes %+v, want not-ready, restarted, ready", p.Changes)
		}
	}
}

// TestGroupsAndServices: two groups on two Services get their own windows;
// each counts only its Service's pods and its own clients.
func TestGroupsAndServices(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRecorder(t0)
	ipA, ipB := netip.MustParseAddr("127.244.0.50"), netip.MustParseAddr("127.244.0.51")
	r.Client(ClientInfo{Name: "a-0", Group: "a", Service: "shop/one", IP: ipA})
	r.Client(ClientInfo{Name: "b-0", Group: "b", Service: "shop/two", IP: ipB})
	for _, p := range []struct{ name, svc string }{{"one-1", "shop/one"}, {"one-2", "shop/one"}, {"two-1", "shop/two"}, {"two-2", "shop/two"}} {
		r.PodPhase(p.name, "", PodReady, t0.Add(-time.Second))
		r.PodServices(p.name, []string{p.svc})
	}
	r.ClientConn("a-0", netip.MustParseAddrPort("127.244.0.2:8471"), true, "", t0)
	for i := range 10 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		r.Served("one-1", ipA, at) // a pins to one pod
		r.Call("a-0", "one-1", codes.OK, "", time.Millisecond, at)
		for _, p := range []string{"two-1", "two-2"} { // b spreads
			r.Served(p, ipB, at)
			r.Call("b-0", p, codes.OK, "", 5*time.Millisecond, at)
		}
	}
	s := r.Summarize([]Window{{Name: "run", From: 0, To: time.Second}}, time.Second)
	if len(s.Groups) != 2 || len(s.Services) != 2 {
		t.Fatalf("groups %d services %d, want 2 and 2", len(s.Groups), len(s.Services))
	}
	type row struct {
		Name          string
		Pods          int
		Jain          float64
		Calls, OK     int64
		ConnsOpened   int
		LatencyBelow2 bool
	}
	var got []row
	for _, g := range s.Groups {
		w := g.Windows[0]
		got = append(got, row{g.Name, len(w.Pods), math.Round(w.Jain*100) / 100, w.Calls, w.ClientOK, w.ConnsOpened, w.LatencyP99 < 2})
	}
	want := []row{{"a", 2, 0.5, 10, 10, 1, true}, {"b", 2, 1, 20, 20, 0, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if s.Services[0].Name != "shop/one" || s.Services[0].Windows[0].Calls != 10 || s.Windows[0].Calls != 30 {
		t.Errorf("service one %+v; all calls %d", s.Services[0], s.Windows[0].Calls)
	}
}
