package l7proxy

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

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

func TestResponseCode(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		header  http.Header
		trailer http.Header
		want    codes.Code
	}{
		{"status in trailers", 200, http.Header{}, http.Header{"Grpc-Status": {"5"}}, codes.NotFound},
		{"Trailers-Only", 200, http.Header{"Grpc-Status": {"14"}}, nil, codes.Unavailable},
		{"trailers win", 200, http.Header{"Grpc-Status": {"14"}}, http.Header{"Grpc-Status": {"0"}}, codes.OK},
		{"garbage status", 200, http.Header{}, http.Header{"Grpc-Status": {"x"}}, codes.Unknown},
		{"200 without status", 200, http.Header{}, nil, codes.Internal},
		{"HTTP 503", 503, http.Header{}, nil, codes.Unavailable},
		{"HTTP 404", 404, http.Header{}, nil, codes.Unimplemented},
		{"HTTP 500", 500, http.Header{}, nil, codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &http.Response{StatusCode: tt.status, Header: tt.header, Trailer: tt.trailer}
			if got := responseCode(res); got != tt.want {
				t.Errorf("responseCode() = %v, want %v", got, tt.want)
			}
		})
	}
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// TestReplayBody: every attempt reads the body from the start, an abandoned
// attempt cannot read on, and a body beyond the limit cannot be replayed.
func TestReplayBody(t *testing.T) {
	t.Run("second attempt after a partial read", func(t *testing.T) {
		b := newReplayBody(strings.NewReader("hello world"), 64)
		first, _ := b.next()
		p := make([]byte, 5)
		if n, err := first.Read(p); err != nil || string(p[:n]) != "hello" {
			t.Fatalf("first read = %q, %v", p[:n], err)
		}
		second, err := b.next()
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, second); got != "hello world" {
			t.Errorf("second attempt read %q, want the whole body", got)
		}
		if _, err := first.Read(p); !errors.Is(err, errStaleAttempt) {
			t.Errorf("abandoned attempt's read: %v, want errStaleAttempt", err)
		}
	})
	t.Run("over the limit", func(t *testing.T) {
		b := newReplayBody(strings.NewReader("0123456789"), 4)
		first, _ := b.next()
		if got := readAll(t, first); got != "0123456789" {
			t.Errorf("first attempt read %q", got)
		}
		if _, err := b.next(); !errors.Is(err, errReplayLimit) {
			t.Errorf("next() after 10 bytes with limit 4: %v, want errReplayLimit", err)
		}
	})
	t.Run("abandoned attempt waiting for client data", func(t *testing.T) {
		pr, pw := io.Pipe()
		b := newReplayBody(pr, 64)
		first, _ := b.next()
		staleErr := make(chan error, 1)
		go func() {
			_, err := first.Read(make([]byte, 8)) // blocks: the client sent nothing yet
			staleErr <- err
		}()
		second, err := b.next() // must not wait for the blocked read
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			pw.Write([]byte("late"))
			pw.Close()
		}()
		if got := readAll(t, second); got != "late" {
			t.Errorf("new attempt read %q, want the bytes the abandoned read received", got)
		}
		if err := <-staleErr; !errors.Is(err, errStaleAttempt) {
			t.Errorf("abandoned read: %v, want errStaleAttempt", err)
		}
	})
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
