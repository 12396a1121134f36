package evidence

import (
	"testing"
	"time"
)

// TestConns: over several readings a connection that was open from the
// start is counted from the first reading, one that opened later gets
// all its calls and a life from the reading before it appeared, one
// that closed is kept with its calls up to the last reading that saw it.
func TestConns(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rs := []Sample{
		{At: at(0), Sockets: map[int64]Socket{1: {"10.0.0.1:1000", 100}, 2: {"10.0.0.2:1000", 50}}},
		{At: at(1), Sockets: map[int64]Socket{1: {"10.0.0.1:1000", 110}, 2: {"10.0.0.2:1000", 60}}},
		{At: at(2), Sockets: map[int64]Socket{1: {"10.0.0.1:1000", 120}, 3: {"10.0.0.2:1001", 5}}},
		{At: at(3), Sockets: map[int64]Socket{1: {"10.0.0.1:1000", 130}, 3: {"10.0.0.2:1001", 15}}},
	}
	got := conns(rs)
	want := []Conn{
		{Remote: "10.0.0.1:1000", Calls: 30, Total: 130, Life: 3 * time.Second},
		{Remote: "10.0.0.2:1000", Calls: 10, Total: 60, Closed: true, Life: time.Second},
		{Remote: "10.0.0.2:1001", Calls: 15, Total: 15, New: true, Life: 2 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("conns = %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("conn %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	for _, tt := range []struct {
		window time.Duration
		want   int
	}{{100 * time.Millisecond, 2}, {time.Second, 2}, {5 * time.Second, 6}, {40 * time.Second, 11}} {
		if n := readings(tt.window); n != tt.want {
			t.Errorf("readings(%v) = %d; want %d", tt.window, n, tt.want)
		}
	}
}
