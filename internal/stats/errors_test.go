package stats

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
)

func TestErrorWindows(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type fail struct {
		at    int // ms
		code  codes.Code
		cause string
	}
	tests := []struct {
		name  string
		fails []fail
		want  []ErrorWindow
	}{
		{name: "none"},
		{
			name:  "one failure",
			fails: []fail{{1250, codes.Unavailable, "refused"}},
			want:  []ErrorWindow{{From: Offset(1200 * time.Millisecond), To: Offset(1300 * time.Millisecond), Failed: 1, ByCode: map[string]int64{"Unavailable": 1}, ByCause: map[string]int64{"refused": 1}}},
		},
		{
			name: "gap shorter than ErrorGap merges",
			fails: []fail{
				{1000, codes.Unavailable, "refused"}, {1850, codes.DeadlineExceeded, "deadline"}, {1999, codes.Unavailable, ""},
			},
			want: []ErrorWindow{{From: Offset(time.Second), To: Offset(2 * time.Second), Failed: 3,
				ByCode:  map[string]int64{"Unavailable": 2, "DeadlineExceeded": 1},
				ByCause: map[string]int64{"refused": 1, "deadline": 1, "other": 1}}},
		},
		{
			name:  "gap of ErrorGap splits",
			fails: []fail{{1000, codes.Unavailable, "goaway"}, {2100, codes.Unavailable, "goaway"}},
			want: []ErrorWindow{
				{From: Offset(time.Second), To: Offset(1100 * time.Millisecond), Failed: 1, ByCode: map[string]int64{"Unavailable": 1}, ByCause: map[string]int64{"goaway": 1}},
				{From: Offset(2100 * time.Millisecond), To: Offset(2200 * time.Millisecond), Failed: 1, ByCode: map[string]int64{"Unavailable": 1}, ByCause: map[string]int64{"goaway": 1}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRecorder(t0)
			for i := range 50 {
				r.Call("c", "a", codes.OK, "", time.Millisecond, ms(i*100))
			}
			for _, f := range tt.fails {
				r.Call("c", "", f.code, f.cause, time.Millisecond, ms(f.at))
			}
			s := r.Summarize(nil, 5*time.Second)
			if diff := cmp.Diff(tt.want, s.ErrorWindows, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("error windows (-want +got):\n%s", diff)
			}
			var total int64
			for _, n := range s.FailedTimeline {
				total += n
			}
			if total != int64(len(tt.fails)) {
				t.Errorf("failed timeline sums to %d, want %d", total, len(tt.fails))
			}
		})
	}
}

func TestRebalance(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ip := netip.MustParseAddr("127.244.0.50")
	// Pods a and b are Ready before the start; c turns Ready at 2s; every
	// 100ms bucket a and b serve 10 calls each and c serves share(t).
	tests := []struct {
		name     string
		share    func(t time.Duration) int // c's calls per bucket
		cGone    time.Duration             // c deleted at; 0 = never
		want     *float64
		survived bool
		seconds  float64
	}{
		{name: "at once", share: func(time.Duration) int { return 10 }, want: ptr(0), survived: true, seconds: 0},
		// The span from 4.9s holds 9 full buckets of c: 90 of 290 calls,
		// 0.93 of a fair third; c's first call in it is at 5s, 3s after
		// Ready.
		{name: "after 3s", share: func(t time.Duration) int {
			if t >= 5*time.Second {
				return 10
			}
			return 0
		}, want: ptr(3), survived: true, seconds: 3},
		{name: "just under 90% never", share: func(time.Duration) int { return 8 }, survived: true, seconds: math.Inf(1)},
		// fair share among 3 is 10 of 28 calls: 8 is 0.86 of fair, 9 is 0.93.
		{name: "just over 90%", share: func(time.Duration) int { return 9 }, want: ptr(0), survived: true, seconds: 0},
		{name: "deleted before", share: func(time.Duration) int { return 0 }, cGone: 4 * time.Second, survived: false, seconds: math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRecorder(t0)
			r.Client(ClientInfo{Name: "x", IP: ip})
			r.PodPhase("a", "", PodReady, at(-time.Second))
			r.PodPhase("b", "", PodReady, at(-time.Second))
			r.PodPhase("c", "", PodCreated, at(time.Second))
			r.PodPhase("c", "", PodReady, at(2*time.Second))
			if tt.cGone > 0 {
				r.PodPhase("c", "", PodTerminating, at(tt.cGone))
			}
			for b := range 100 {
				d := time.Duration(b) * Bucket
				for range 10 {
					r.Served("a", ip, at(d))
					r.Served("b", ip, at(d))
				}
				if d >= 2*time.Second && (tt.cGone == 0 || d < tt.cGone) {
					for range tt.share(d) {
						r.Served("c", ip, at(d))
					}
				}
			}
			s := r.Summarize(nil, 10*time.Second)
			if len(s.Rebalance) != 1 {
				t.Fatalf("rebalance entries %+v, want one for pod c", s.Rebalance)
			}
			rb := s.Rebalance[0]
			if rb.Pod != "c" || rb.ReadyAt != Offset(2*time.Second) || rb.Survived != tt.survived || !cmp.Equal(rb.After, tt.want) {
				t.Errorf("got %+v (after %v), want pod c ready 2s survived %v after %v", rb, deref(rb.After), tt.survived, deref(tt.want))
			}
			got := RebalanceSeconds(s.Rebalance)
			if !(got == tt.seconds || math.IsNaN(got) && math.IsNaN(tt.seconds)) {
				t.Errorf("RebalanceSeconds = %v, want %v", got, tt.seconds)
			}
		})
	}
}

func ptr(v float64) *float64 { return &v }

func deref(p *float64) any {
	if p == nil {
		return "never"
	}
	return *p
}
