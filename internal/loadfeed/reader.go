package loadfeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Reader reads one Feed through its Handler, in order, and moves the
// events' times onto its own clock. Its methods are not safe for
// concurrent use: one goroutine polls.
type Reader struct {
	// URL is the Handler's base, e.g. "http://127.0.0.1:41234" (a
	// port-forward to the pod's events port); Token its bearer token.
	URL, Token string
	// Client sends the requests; nil is http.DefaultClient. Bound each
	// request with the context given to Poll.
	Client *http.Client
	// Now is the reader's clock; nil is time.Now.
	Now func() time.Time

	id       string        // the feed's ID, once read
	next     uint64        // the last sequence number read
	lost     uint64        // events the feed dropped before they were read
	restarts int           // times the feed was found new (its client restarted)
	offset   time.Duration // pod clock minus reader clock
	bestRTT  time.Duration // the round trip offset was taken at; 0: none yet
	size     int           // the events a page asks for; 0: MaxPage
	gaps     []gap         // where the feed dropped events, oldest first
}

// gap is n events the feed dropped before they were read, and when the
// first event held after them was due (on the reader's clock).
type gap struct {
	n    uint64
	next time.Time
}

// Lost is how many events the feed dropped before this reader read them.
func (r *Reader) Lost() uint64 { return r.lost }

// LostFrom is how many of those were followed by an event due at or
// after t (on the reader's clock): the dropped events are older than the
// event after them, so the others were all due before t. A caller that
// drops events due before t anyway (a load's set-up) asks LostFrom(t).
func (r *Reader) LostFrom(t time.Time) uint64 {
	var n uint64
	for _, g := range r.gaps {
		if !g.next.Before(t) {
			n += g.n
		}
	}
	return n
}

// Restarts is how many times the feed was found to be a new one (another
// ID, or fewer events than already read: its process restarted); the
// reader then reads the new feed from its start.
func (r *Reader) Restarts() int { return r.restarts }

// clockReadings is how many readings of the pod's clock alone the first
// Poll takes before any events, keeping the one with the shortest round
// trip, so that the first events are not moved by a slow first request.
const clockReadings = 3

// Offset returns the pod's clock minus the reader's as estimated so far,
// and the round trip of the reading it comes from (0 before any).
func (r *Reader) Offset() (offset, rtt time.Duration) { return r.offset, r.bestRTT }

// MinPage is the fewest events a page asks for (PageSize).
const MinPage = 250

// PageSize is how many events the next page asks for: MaxPage at first;
// a quarter of a page that timed out as the first of its Poll (its
// context's deadline, the Client's timeout or a network timeout came
// before it arrived), at least MinPage: the pod builds a page whole
// before sending it, so a starved pod or a slow port-forward may never
// answer a full one in time, and asking it again would never end; twice
// as many after a full page that arrived within a quarter of the time its
// context had left (any full page when it had no deadline), up to
// MaxPage.
func (r *Reader) PageSize() int {
	if r.size == 0 {
		return MaxPage
	}
	return r.size
}

// Poll reads every event written since the last Poll (several pages if
// need be) and returns them oldest first, with At and GoAwayAt on the
// reader's clock. It returns what it read before an error, with the
// error; the next Poll goes on from there, with smaller pages if a page
// timed out (PageSize).
func (r *Reader) Poll(ctx context.Context) ([]Event, error) {
	if err := r.readClock(ctx); err != nil {
		return nil, err
	}
	var done, out []Event // done: read from an earlier feed, on the reader's clock
	for {
		asked, n := r.next, r.PageSize()
		began := time.Now()
		deadline, bounded := ctx.Deadline()
		p, err := r.page(ctx, n)
		if err != nil {
			if timedOut(err) && len(done) == 0 && len(out) == 0 {
				// Not when earlier pages of this read arrived: then the
				// read's time ran out, not a page's.
				r.size = max(n/4, MinPage)
			}
			return append(done, r.shift(out)...), err
		}
		if len(p.Events) == n && (!bounded || time.Since(began) < deadline.Sub(began)/4) {
			r.size = min(2*n, MaxPage)
		}
		if (r.id != "" && p.ID != r.id) || p.Next < asked {
			// A new feed: its client restarted, maybe on another node
			// with another clock. Read it from its start, its clock
			// read again.
			done, out = append(done, r.shift(out)...), nil
			r.id, r.next, r.bestRTT = p.ID, 0, 0
			r.restarts++
			if err := r.readClock(ctx); err != nil {
				return done, err
			}
			continue
		}
		r.id = p.ID
		r.lost += p.Lost
		if p.Lost > 0 && len(p.Events) > 0 {
			r.gaps = append(r.gaps, gap{n: p.Lost, next: p.Events[0].At.Add(-r.offset)})
		}
		r.next = p.Next
		out = append(out, p.Events...)
		if len(p.Events) < n {
			return append(done, r.shift(out)...), nil
		}
	}
}

// timedOut reports whether err is a deadline or a timeout (the read
// context's, the Client's, the network's), not a refusal.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// readClock takes clockReadings readings of the feed's clock alone when
// none was taken since the reader or its feed started.
func (r *Reader) readClock(ctx context.Context) error {
	if r.bestRTT != 0 {
		return nil
	}
	for range clockReadings {
		if _, err := r.page(ctx, 0); err != nil {
			return err
		}
	}
	return nil
}

// page asks for up to n events after r.next and takes a clock reading.
func (r *Reader) page(ctx context.Context, n int) (Page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/events?after=%d&max=%d", r.URL, r.next, n), nil)
	if err != nil {
		return Page{}, err
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	c := r.Client
	if c == nil {
		c = http.DefaultClient
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	t0 := now()
	resp, err := c.Do(req)
	if err != nil {
		return Page{}, fmt.Errorf("loadfeed: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Page{}, fmt.Errorf("loadfeed: %s: %s", resp.Status, b)
	}
	var p Page
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return Page{}, fmt.Errorf("loadfeed: reading the events: %w", err)
	}
	t1 := now()
	if rtt := max(t1.Sub(t0), 1); r.bestRTT == 0 || rtt < r.bestRTT {
		r.bestRTT = rtt
		r.offset = p.Now.Sub(t0.Add(rtt / 2))
	}
	return p, nil
}

// shift moves the events' times onto the reader's clock.
func (r *Reader) shift(evs []Event) []Event {
	for i := range evs {
		evs[i].At = evs[i].At.Add(-r.offset)
		if g := evs[i].GoAwayAt; g != nil {
			t := g.Add(-r.offset)
			evs[i].GoAwayAt = &t
		}
	}
	return evs
}
