// Package loadfeed carries what a load client in a cluster's pod observes
// to the runner on the user's machine: Feed records the client's calls,
// connections and schedule lag (it is the client's load.Observer); Handler
// serves them over HTTP to holders of a bearer token, in order, from a
// sequence number on; Reader polls them (through kubectl's port-forward)
// and hands them on with their times moved from the pod's clock onto the
// reader's.
//
// The clocks: every answer carries the pod's time as it was written; the
// reader takes the midpoint of its request as the same instant, and of its
// readings keeps the one with the shortest round trip (the offset is off
// by at most half of it, as in NTP's clock filter), so events keep their
// spacing and land within that bound of when they happened.
package loadfeed

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/plan"
)

// Event kinds.
const (
	KindCall = "call" // a call ended (load.Result)
	KindConn = "conn" // a connection opened or closed (load.ConnEvent)
	KindSent = "sent" // a call was launched, with its schedule lag
)

// Event is one thing the client observed, as JSON. Times are the pod's
// clock in a Feed's answer and the reader's once Reader has them.
type Event struct {
	Seq  uint64 `json:"seq"`
	Kind string `json:"kind"`
	// At is when it happened: a call's or a launch's due time, a
	// connection event's time of notice.
	At time.Time `json:"at"`
	// A call's latency (ns, from due to its end), code, cause and the pod
	// that answered.
	LatencyNs int64      `json:"latencyNs,omitempty"`
	Code      codes.Code `json:"code,omitempty"`
	Cause     plan.Cause `json:"cause,omitempty"`
	Pod       string     `json:"pod,omitempty"`
	PodIP     string     `json:"podIP,omitempty"`
	// A connection's remote "IP:port", whether it opened, and why it
	// closed; GoAwayAt is when a GOAWAY that ended it arrived.
	Remote   string           `json:"remote,omitempty"`
	Open     bool             `json:"open,omitempty"`
	Reason   load.CloseReason `json:"reason,omitempty"`
	GoAwayAt *time.Time       `json:"goAwayAt,omitempty"`
	// A launch's schedule lag (ns).
	LagNs int64 `json:"lagNs,omitempty"`
}

// Page is one answer of Handler: the feed's ID (random, new with every
// Feed, so a reader tells a restarted client's feed from the one it was
// reading), the events after the asked sequence number (at most the asked
// count), the sequence number to ask after next (the last one written
// when the asked one is beyond it), how many events were dropped unread
// (the buffer was full), and the pod's time as the answer was written.
type Page struct {
	ID     string    `json:"id"`
	Events []Event   `json:"events"`
	Next   uint64    `json:"next"`
	Lost   uint64    `json:"lost"`
	Now    time.Time `json:"now"`
}

// DefaultCapacity is a Feed's buffer when NewFeed is given 0: about 35 MB
// (an Event is about 170 bytes), 200 s of a client at 500 calls/s with
// its launches, or far longer between the reader's polls, which come
// every second.
const DefaultCapacity = 200_000

// MaxPage is the most events one answer holds.
const MaxPage = 20_000

// Feed records a client's events in a bounded ring, oldest first. It is
// a load.Observer and load.LagObserver; its methods are safe for
// concurrent use. When the ring is full each new event drops the oldest,
// which is counted (Page.Lost).
type Feed struct {
	id  string
	now func() time.Time

	mu    sync.Mutex
	ring  []Event // grows to cap, then wraps; ring[head] holds seq first
	head  int
	first uint64 // the sequence number of the oldest event held
	next  uint64 // the sequence number of the next event
	cap   int
}

// NewFeed returns a Feed holding up to capacity events (0:
// DefaultCapacity).
func NewFeed(capacity int) *Feed {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	var id [8]byte
	rand.Read(id[:])
	return &Feed{id: hex.EncodeToString(id[:]), now: time.Now, cap: capacity, first: 1, next: 1}
}

func (f *Feed) add(e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.Seq = f.next
	f.next++
	if len(f.ring) < f.cap {
		f.ring = append(f.ring, e)
		return
	}
	f.ring[f.head] = e
	f.head = (f.head + 1) % len(f.ring)
	f.first++
}

// Called records a finished call.
func (f *Feed) Called(r load.Result) {
	f.add(Event{Kind: KindCall, At: r.Due, LatencyNs: int64(r.Latency), Code: r.Code, Cause: r.Cause, Pod: r.Pod, PodIP: r.PodIP})
}

// Conn records a connection event at the time it is told.
func (f *Feed) Conn(c load.ConnEvent) {
	e := Event{Kind: KindConn, At: f.now(), Remote: c.Remote.String(), Open: c.Open, Reason: c.Reason}
	if !c.GoAwayAt.IsZero() {
		t := c.GoAwayAt
		e.GoAwayAt = &t
	}
	f.add(e)
}

// Sent records a launch and its schedule lag.
func (f *Feed) Sent(due time.Time, lag time.Duration) {
	f.add(Event{Kind: KindSent, At: due, LagNs: int64(lag)})
}

// page returns up to n events after seq after.
func (f *Feed) page(after uint64, n int) Page {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := f.next - 1 // 0: none written yet
	p := Page{ID: f.id, Next: after, Now: f.now()}
	if after >= last { // nothing new, or asked beyond what was written
		p.Next = last
		return p
	}
	if after < f.first-1 {
		p.Lost = f.first - 1 - after
		after = f.first - 1
	}
	count := min(last-after, uint64(n))
	for i := range count {
		k := (f.head + int(after+1+i-f.first)) % len(f.ring)
		p.Events = append(p.Events, f.ring[k])
	}
	p.Next = after + count
	return p
}

// Handler serves feed at GET /events?after=SEQ&max=N (after 0 and max
// MaxPage by default; max 0 reads the clock and the position alone) as a
// JSON Page, to requests whose Authorization is
// "Bearer " + token (compared in constant time; 401 otherwise). Other
// paths are 404, other methods 405. token must not be empty.
func Handler(feed *Feed, token string) http.Handler {
	want := []byte("Bearer " + token)
	mux := http.NewServeMux()
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 || token == "" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		after, n, ok := query(r)
		if !ok {
			http.Error(w, "after and max must be whole numbers", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(feed.page(after, n))
	})
	return mux
}

// query reads after and max.
func query(r *http.Request) (after uint64, n int, ok bool) {
	q := r.URL.Query()
	n = MaxPage
	if s := q.Get("after"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		after = v
	}
	if s := q.Get("max"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, 0, false
		}
		n = min(v, MaxPage)
	}
	return after, n, true
}
