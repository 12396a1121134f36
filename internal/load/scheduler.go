package load

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Scheduler wakes the clients of a run at their calls' due times, all from
// one goroutine, and more precisely than Go timers can: on Linux a runtime
// timer (time.Sleep, time.Timer) wakes up to about 1 ms late
// (golang/go#44343), which at 2000 calls/s is two calls' worth and shows
// in every latency measured from the due time. Run waits with a timer
// until spinUpTo before the next due time and then with a timerfd read
// through the runtime's netpoller (see waiter: precise, and holding no P
// while it waits), never busy-waiting. Clients use it when
// Config.Scheduler (or the web configs' Scheduler) is set; without one
// each client paces itself with a timer.
//
// Run must be running for its clients to send calls; clients whose Run
// started before the Scheduler's wait for it. Safe for concurrent use.
type Scheduler struct {
	mu    sync.Mutex
	queue entries
	wake  chan struct{} // an entry was added: the next due time may be earlier
}

// spinUpTo is how long before a due time the Scheduler switches from a
// runtime timer to its precise waiter: a timer wakes up to about 1 ms
// late.
const spinUpTo = 1500 * time.Microsecond

// NewScheduler returns a Scheduler; run it with Run.
func NewScheduler() *Scheduler {
	return &Scheduler{wake: make(chan struct{}, 1)}
}

// entry is one client's schedule in the queue, keyed by its next due time.
type entry struct {
	ctx   context.Context
	p     pacing
	s     schedule
	index int
	done  chan struct{} // closed when the entry leaves the queue
}

// pace runs p through the Scheduler until ctx ends.
func (sc *Scheduler) pace(ctx context.Context, p pacing) {
	e := &entry{ctx: ctx, p: p, s: schedule{base: time.Now().Add(p.phase), rate: p.rate()}, done: make(chan struct{})}
	sc.mu.Lock()
	heap.Push(&sc.queue, e)
	sc.mu.Unlock()
	select {
	case sc.wake <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		sc.remove(e)
	case <-e.done:
	}
}

func (sc *Scheduler) remove(e *entry) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if e.index >= 0 {
		heap.Remove(&sc.queue, e.index)
		close(e.done)
	}
}

// Run launches the clients' calls as they fall due until ctx ends.
func (sc *Scheduler) Run(ctx context.Context) error {
	w := newWaiter()
	defer w.close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		next, ok := sc.next()
		if !ok {
			select {
			case <-ctx.Done():
			case <-sc.wake:
			}
			continue
		}
		if wait := time.Until(next) - spinUpTo; wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				continue
			case <-sc.wake:
				timer.Stop()
				continue
			case <-timer.C:
			}
		}
		w.wait(time.Until(next))
		sc.fireDue()
	}
	return nil
}

// next returns the earliest due time in the queue.
func (sc *Scheduler) next() (time.Time, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.queue) == 0 {
		return time.Time{}, false
	}
	e := sc.queue[0]
	select {
	case <-e.p.changed:
		e.s.setRate(e.p.rate())
		heap.Fix(&sc.queue, 0)
	default:
	}
	return sc.queue[0].s.due(), true
}

// fireDue launches every call due by now, each entry then moving on to its
// next call; an entry whose schedule is over leaves the queue. It says
// whether it launched any.
func (sc *Scheduler) fireDue() (fired bool) {
	now := time.Now()
	for {
		sc.mu.Lock()
		if len(sc.queue) == 0 || sc.queue[0].s.due().After(now) {
			sc.mu.Unlock()
			return fired
		}
		e := sc.queue[0]
		select {
		case <-e.p.changed: // a new rate: the next due time moves
			e.s.setRate(e.p.rate())
			heap.Fix(&sc.queue, 0)
			sc.mu.Unlock()
			continue
		default:
		}
		due := e.s.due()
		e.s.k++
		heap.Fix(&sc.queue, 0)
		sc.mu.Unlock()
		if e.p.fire(e.ctx, due) {
			fired = true
		} else {
			sc.remove(e)
		}
	}
}

// entries is a min-heap of entries by next due time.
type entries []*entry

func (q entries) Len() int           { return len(q) }
func (q entries) Less(i, j int) bool { return q[i].s.due().Before(q[j].s.due()) }
func (q entries) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *entries) Push(x any) {
	e := x.(*entry)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *entries) Pop() any {
	old := *q
	e := old[len(old)-1]
	e.index = -1
	*q = old[:len(old)-1]
	return e
}
