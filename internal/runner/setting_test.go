package runner

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSharedSetting: holders of the same value share it; a different value
// waits until every holder released; a waiter whose ctx ends gives up.
func TestSharedSetting(t *testing.T) {
	var mu sync.Mutex
	var set []time.Duration
	s := &sharedSetting{set: func(d time.Duration) { mu.Lock(); set = append(set, d); mu.Unlock() }}
	ctx := context.Background()
	r1, err := s.hold(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s.hold(ctx, 30*time.Second) // same value: shared at once
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.hold(short, time.Second); err == nil {
		t.Fatal("a different value was granted while others held the setting")
	}
	got := make(chan time.Duration, 1)
	go func() {
		r, err := s.hold(ctx, time.Second)
		if err != nil {
			got <- -1
			return
		}
		got <- time.Second
		r()
	}()
	r1()
	select {
	case <-got:
		t.Fatal("granted while one holder remained")
	case <-time.After(50 * time.Millisecond):
	}
	r2()
	r2() // a second release does nothing
	if v := <-got; v != time.Second {
		t.Fatalf("waiter got %v, want the setting once free", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(set) != 2 || set[0] != 30*time.Second || set[1] != time.Second {
		t.Errorf("values set %v, want [30s 1s]", set)
	}
}
