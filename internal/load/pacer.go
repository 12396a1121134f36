package load

import (
	"context"
	"time"
)

// pacing is one client's open-loop schedule: call k is due at start +
// phase + k/rate, for k = 0, 1, ... until the client's ctx ends. launch
// is called for each call when it is due and must not block: the schedule
// never waits for a call's work, so a slow server cannot slow the offered
// load (no coordinated omission). sent, if not nil, learns how late each
// call was launched against its due time (the schedule lag: the
// generator's own health, not the system's). rate is read at the start and
// again whenever changed receives (nil: it never changes); the schedule
// then continues from the last call due (see schedule.setRate). A call
// due after ctx's deadline is never launched.
type pacing struct {
	rate    func() float64
	changed <-chan struct{}
	phase   time.Duration
	launch  func(due time.Time)
	sent    func(due time.Time, lag time.Duration)
}

// run paces calls until ctx ends: through sched when not nil (precise,
// shared by the clients of a run), else with a timer of its own (Go timers
// wake up to about 1 ms late on Linux).
func (p pacing) run(ctx context.Context, sched *Scheduler) {
	if sched != nil {
		sched.pace(ctx, p)
		return
	}
	s := schedule{base: time.Now().Add(p.phase), rate: p.rate()}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		select { // a busy loop that never waits still sees a new rate
		case <-p.changed:
			s.setRate(p.rate())
		default:
		}
		due := s.due()
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-p.changed:
				timer.Stop()
				s.setRate(p.rate())
				continue
			case <-timer.C:
			}
		}
		if !p.fire(ctx, due) {
			return
		}
		s.k++
	}
}

// fire launches the call due at due, unless ctx ended or due is past its
// deadline (select picks at random when a timer and ctx are both ready,
// and ctx's own timer may fire late); false when the schedule is over.
func (p pacing) fire(ctx context.Context, due time.Time) bool {
	if ctx.Err() != nil || pastDeadline(ctx, due) {
		return false
	}
	if p.sent != nil {
		p.sent(due, max(time.Since(due), 0))
	}
	p.launch(due)
	return true
}

// fixedRate is a rate for pacing that never changes.
func fixedRate(r float64) func() float64 { return func() float64 { return r } }

func pastDeadline(ctx context.Context, t time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && t.After(d)
}

// schedule is the open-loop timetable: call k is due at base + k/rate. A
// rate change restarts the count from the last call due.
type schedule struct {
	base time.Time
	rate float64
	k    int64
}

func (s *schedule) at(k int64) time.Time {
	return s.base.Add(time.Duration(float64(k) * float64(time.Second) / s.rate))
}

func (s *schedule) due() time.Time { return s.at(s.k) }

func (s *schedule) setRate(rate float64) {
	if rate == s.rate {
		return
	}
	if s.k > 0 {
		s.base, s.k = s.at(s.k-1), 1
	}
	s.rate = rate
}
