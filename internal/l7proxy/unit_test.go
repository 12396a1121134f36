package l7proxy

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

func TestEncodeMessage(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"printable ASCII unchanged", "no healthy upstream", "no healthy upstream"},
		{"percent", "100% sure", "100%25 sure"},
		{"UTF-8", "prix ü", "prix %C3%BC"},
		{"control characters", "a\nb\tc", "a%0Ab%09c"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := encodeMessage(tt.in); got != tt.want {
				t.Errorf("encodeMessage(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name   string
		status int
		fields []hpack.HeaderField
		want   codes.Code
	}{
		{"grpc-status", 200, []hpack.HeaderField{{Name: "grpc-status", Value: "5"}}, codes.NotFound},
		{"Trailers-Only", 200, []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "grpc-status", Value: "14"}}, codes.Unavailable},
		{"garbage status", 200, []hpack.HeaderField{{Name: "grpc-status", Value: "x"}}, codes.Unknown},
		{"200 without status", 200, nil, codes.Internal},
		{"HTTP 503", 503, nil, codes.Unavailable},
		{"HTTP 404", 404, nil, codes.Unimplemented},
		{"HTTP 500", 500, nil, codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &stream{httpStatus: tt.status}
			if got := s.codeOf(tt.fields); got != tt.want {
				t.Errorf("codeOf() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRTTEstimate follows tower's peak_ewma tests (default_decay,
// compound_decay) with explicit times.
func TestRTTEstimate(t *testing.T) {
	ms := func(d float64) float64 { return d * float64(time.Millisecond) }
	at := func(d float64) time.Duration { return time.Duration(ms(d)) }
	decay := ms(1000)

	t.Run("default decays", func(t *testing.T) {
		e := rttEstimate{rtt: ms(10)}
		if got := e.update(0, at(100), decay); got <= ms(9) || got >= ms(10) {
			t.Errorf("after 100ms: %v, want in (9ms, 10ms)", time.Duration(got))
		}
		if got := e.update(0, at(200), decay); got <= ms(8) || got >= ms(9) {
			t.Errorf("after 200ms: %v, want in (8ms, 9ms)", time.Duration(got))
		}
	})
	t.Run("compound", func(t *testing.T) {
		ep := &endpoint{}
		ep.rtt.rtt = ms(20)
		if got := ep.cost(0, decay); got != ms(20) {
			t.Errorf("cost at 0 = %v, want 20ms", time.Duration(got))
		}
		ep.pending.Add(1) // request 0 sent at 100ms
		if got := ep.cost(at(100), decay); got <= ms(20) {
			t.Errorf("cost with one pending = %v, want > 20ms", time.Duration(got))
		}
		ep.pending.Add(1) // request 1 sent at 200ms
		if got := ep.cost(at(200), decay); got <= ms(40) {
			t.Errorf("cost with two pending = %v, want > 40ms", time.Duration(got))
		}
		ep.pending.Add(-1)
		ep.rtt.update(ms(200), at(300), decay) // request 0 answered: a 200ms peak
		if got := ep.cost(at(300), decay); got != ms(400) {
			t.Errorf("cost after the peak = %v, want 400ms", time.Duration(got))
		}
		ep.pending.Add(-1)
		ep.rtt.update(ms(200), at(400), decay) // request 1: 200ms again
		if got := ep.cost(at(400), decay); math.Abs(got-ms(200)) > 1 {
			t.Errorf("cost with none pending = %v, want 200ms", time.Duration(got))
		}
		if got := ep.cost(at(1400), decay); got >= ms(100) {
			t.Errorf("cost a second later = %v, want < 100ms", time.Duration(got))
		}
		if got := ep.cost(at(11400), decay); got >= ms(0.1) {
			t.Errorf("cost 11s later = %v, want < 100us", time.Duration(got))
		}
	})
}

// TestPlanProxyPolicies: the proxy builds a balancer for every policy a
// scenario may name (plan.ProxyPolicies), lists each of its own policies
// there, and refuses any other name.
func TestPlanProxyPolicies(t *testing.T) {
	for _, policy := range plan.ProxyPolicies {
		t.Run(policy, func(t *testing.T) {
			if _, err := newBalancer(policy, EWMA{}); err != nil {
				t.Errorf("newBalancer(%q): %v", policy, err)
			}
		})
	}
	for _, policy := range []string{RoundRobin, LeastRequest, PeakEWMA} {
		if !slices.Contains(plan.ProxyPolicies, policy) {
			t.Errorf("policy %q is missing from plan.ProxyPolicies %v", policy, plan.ProxyPolicies)
		}
	}
	if _, err := newBalancer("random", EWMA{}); err == nil {
		t.Error(`newBalancer("random") succeeded`)
	}
}

// TestPolicies: each policy's pick rule on endpoints with fixed load.
func TestPolicies(t *testing.T) {
	eps := func(n int) []*endpoint {
		out := make([]*endpoint, n)
		for i := range out {
			out[i] = &endpoint{}
			out[i].rtt.rtt = float64(10 * time.Millisecond)
		}
		return out
	}
	count := func(b balancer, es []*endpoint, n int) []int {
		counts := make([]int, len(es))
		for range n {
			picked := b.pick(es, 0)
			for i, e := range es {
				if e == picked {
					counts[i]++
				}
			}
		}
		return counts
	}

	t.Run("round_robin cycles", func(t *testing.T) {
		b, _ := newBalancer(RoundRobin, EWMA{})
		if got := count(b, eps(3), 300); got[0] != 100 || got[1] != 100 || got[2] != 100 {
			t.Errorf("picks %v, want 100 each", got)
		}
	})
	t.Run("least_request avoids the busy endpoint", func(t *testing.T) {
		b, _ := newBalancer(LeastRequest, EWMA{})
		es := eps(2)
		es[0].active.Store(5)
		// The busy endpoint wins only when both draws hit it: 1/4.
		got := count(b, es, 4000)
		if share := float64(got[0]) / 4000; share < 0.2 || share > 0.3 {
			t.Errorf("busy endpoint's share %.3f, want about 0.25 (picks %v)", share, got)
		}
	})
	t.Run("peak_ewma never picks the costliest of distinct pairs", func(t *testing.T) {
		b, _ := newBalancer(PeakEWMA, EWMA{}.withDefaults())
		es := eps(3)
		es[2].rtt.rtt = float64(50 * time.Millisecond)
		if got := count(b, es, 3000); got[2] != 0 || got[0] == 0 || got[1] == 0 {
			t.Errorf("picks %v, want none for the slow third and some for the others", got)
		}
		es[0].pending.Store(10) // 10ms x 11 > 50ms x 1
		if got := count(b, es, 3000); got[0] != 0 {
			t.Errorf("picks %v, want none for the endpoint with 10 pending", got)
		}
	})
}
