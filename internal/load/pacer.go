package load

import (
	"context"
	"time"
)

// pace runs the open-loop schedule every client shares: it calls launch(due)
// for call k = 0, 1, ... due at start + k/rate, until ctx ends, never
// waiting for launch's work, so a slow server cannot slow the offered load
// (no coordinated omission). launch must not block. rate is read at start
// and again whenever changed receives (nil: the rate never changes); the
// schedule then continues from the last call due (see schedule.setRate). A
// call due after ctx's deadline is never launched.
func pace(ctx context.Context, rate func() float64, changed <-chan struct{}, launch func(due time.Time)) {
	s := schedule{base: time.Now(), rate: rate()}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		select { // a busy loop that never waits still sees a new rate
		case <-changed:
			s.setRate(rate())
		default:
		}
		due := s.due()
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-changed:
				timer.Stop()
				s.setRate(rate())
				continue
			case <-timer.C:
			}
		}
		// A call due after the end is never sent (select picks at random
		// when the timer and ctx are both ready, and ctx's own timer may
		// fire late).
		if ctx.Err() != nil || pastDeadline(ctx, due) {
			return
		}
		launch(due)
		s.k++
	}
}

// fixedRate is a rate for pace that never changes.
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
