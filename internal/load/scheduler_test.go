package load

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestScheduler: the Scheduler launches each client's calls in due order,
// one call per schedule slot until the client's ctx ends, reports each
// call's lag, interleaves clients by due time, and lets a client leave
// while the others go on.
func TestScheduler(t *testing.T) {
	sc := NewScheduler()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	type fired struct {
		client string
		due    time.Time
		lag    time.Duration
	}
	var mu sync.Mutex
	var got []fired
	run := func(name string, rate float64, phase, d time.Duration) {
		cctx, ccancel := context.WithTimeout(ctx, d)
		defer ccancel()
		var lastDue time.Time
		pacing{rate: fixedRate(rate), phase: phase,
			launch: func(due time.Time) {
				mu.Lock()
				defer mu.Unlock()
				if !due.After(lastDue) && !lastDue.IsZero() {
					t.Errorf("%s: call due %v launched after one due %v", name, due, lastDue)
				}
				lastDue = due
			},
			sent: func(due time.Time, lag time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, fired{name, due, lag})
			},
		}.run(cctx, sc)
	}
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { run("a", 200, 0, 300*time.Millisecond) })
	wg.Go(func() { run("b", 100, 2*time.Millisecond, 600*time.Millisecond) })
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for i, f := range got {
		count[f.client]++
		if f.lag < 0 {
			t.Errorf("call %d: negative lag %v", i, f.lag)
		}
		if i > 0 && f.due.Before(got[i-1].due) && f.lag == 0 {
			t.Errorf("call %d of %s due %v sent before call %d due %v", i, f.client, f.due, i-1, got[i-1].due)
		}
	}
	// A schedule of d at rate r has calls 0 .. d*r-1 due within d; the last
	// may fall to the deadline either way. Slots, not timing, are checked.
	for _, c := range []struct {
		name string
		want int
	}{{"a", 60}, {"b", 60}} {
		if n := count[c.name]; n < c.want-1 || n > c.want+1 {
			t.Errorf("client %s: %d calls, want %d (+-1)", c.name, n, c.want)
		}
	}
	// b's first call is due at its phase.
	i := slices.IndexFunc(got, func(f fired) bool { return f.client == "b" })
	if i < 0 || got[i].due.Sub(start) < 2*time.Millisecond {
		t.Errorf("b's first call due %v after start, want at least its 2ms phase", got[i].due.Sub(start))
	}
	sc.mu.Lock()
	if n := len(sc.queue); n != 0 {
		t.Errorf("%d entries left in the queue after every client ended", n)
	}
	sc.mu.Unlock()
}

// TestSchedulerRateChange: a new rate takes effect from the next call.
func TestSchedulerRateChange(t *testing.T) {
	sc := NewScheduler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sc.Run(ctx)
	var mu sync.Mutex
	rate := 1000.0
	changed := make(chan struct{}, 1)
	var dues []time.Time
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	pacing{rate: func() float64 { mu.Lock(); defer mu.Unlock(); return rate }, changed: changed,
		launch: func(due time.Time) {
			mu.Lock()
			dues = append(dues, due)
			n := len(dues)
			mu.Unlock()
			switch n {
			case 10:
				mu.Lock()
				rate = 10
				mu.Unlock()
				changed <- struct{}{}
			case 13:
				ccancel()
			}
		}}.run(cctx, sc)
	mu.Lock()
	defer mu.Unlock()
	if len(dues) < 13 {
		t.Fatalf("%d calls, want 13", len(dues))
	}
	if gap := dues[11].Sub(dues[10]); gap != 100*time.Millisecond {
		t.Errorf("gap after the change %v, want 100ms (rate 10/s)", gap)
	}
	if gap := dues[5].Sub(dues[4]); gap != time.Millisecond {
		t.Errorf("gap before the change %v, want 1ms (rate 1000/s)", gap)
	}
}
