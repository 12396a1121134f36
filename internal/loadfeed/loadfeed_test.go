package loadfeed

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/load"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "s3cret-token"

// serve serves feed on loopback for the rest of the test and returns a
// Reader of it.
func serve(t *testing.T, feed *Feed) *Reader {
	t.Helper()
	srv := httptest.NewServer(Handler(feed, token))
	t.Cleanup(srv.Close)
	return &Reader{URL: srv.URL, Token: token, Client: srv.Client()}
}

// TestRoundTrip: what a client observed reaches the reader in order,
// with the pod's clock (an hour ahead here) moved onto the reader's.
func TestRoundTrip(t *testing.T) {
	const skew = time.Hour
	feed := NewFeed(0)
	noticed := time.Now().Add(skew) // the pod's clock
	feed.now = func() time.Time { return time.Now().Add(skew) }
	due := time.Now().Add(skew).Add(-time.Second)
	goAway := due.Add(500 * time.Millisecond)
	remote := netip.MustParseAddrPort("10.8.0.5:8471")
	feed.Sent(due, 3*time.Millisecond)
	feed.Called(load.Result{Due: due, Latency: 2 * time.Millisecond, Code: codes.OK, Pod: "pricing-a", PodIP: "10.8.0.5"})
	feed.Called(load.Result{Due: due, Latency: time.Second, Code: codes.DeadlineExceeded, Cause: "deadline"})
	feed.Conn(load.ConnEvent{Remote: remote, Open: true})
	feed.Conn(load.ConnEvent{Remote: remote, Reason: "goaway", GoAwayAt: goAway})

	r := serve(t, feed)
	evs, err := r.Poll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	offset, rtt := r.Offset()
	if d := offset - skew; d < -rtt || d > rtt {
		t.Fatalf("offset %v, want %v within the round trip %v", offset, skew, rtt)
	}
	back := func(t time.Time) time.Time { return t.Add(-offset) }
	goAwayBack := back(goAway)
	want := []Event{
		{Seq: 1, Kind: KindSent, At: back(due), LagNs: int64(3 * time.Millisecond)},
		{Seq: 2, Kind: KindCall, At: back(due), LatencyNs: int64(2 * time.Millisecond), Pod: "pricing-a", PodIP: "10.8.0.5"},
		{Seq: 3, Kind: KindCall, At: back(due), LatencyNs: int64(time.Second), Code: codes.DeadlineExceeded, Cause: "deadline"},
		{Seq: 4, Kind: KindConn, Remote: "10.8.0.5:8471", Open: true},
		{Seq: 5, Kind: KindConn, Remote: "10.8.0.5:8471", Reason: "goaway", GoAwayAt: &goAwayBack},
	}
	for i := range evs {
		if evs[i].Kind == KindConn { // noticed at the pod's now
			if d := evs[i].At.Sub(back(noticed)); d < -time.Second || d > time.Second {
				t.Errorf("event %d at %v, want about %v", i, evs[i].At, back(noticed))
			}
			evs[i].At = time.Time{}
		}
	}
	if diff := cmp.Diff(want, evs, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// The next poll has only what came since.
	feed.Sent(due, 0)
	evs, err = r.Poll(t.Context())
	if err != nil || len(evs) != 1 || evs[0].Seq != 6 {
		t.Errorf("second poll: %+v, %v; want event 6 alone", evs, err)
	}
}

// TestFullBuffer: when the reader falls behind, the oldest events go and
// are counted, with when the event after them was due (LostFrom);
// paging reads more than one page.
func TestFullBuffer(t *testing.T) {
	feed := NewFeed(MaxPage + 100)
	base := time.Now()
	for i := range MaxPage + 150 {
		feed.Sent(base.Add(time.Duration(i)*time.Millisecond), 0)
	}
	r := serve(t, feed)
	evs, err := r.Poll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const lost = 50 // one by one, the oldest first
	if r.Lost() != lost || len(evs) != MaxPage+100 || evs[0].Seq != lost+1 || evs[len(evs)-1].Seq != MaxPage+150 {
		t.Errorf("read %d events, %d to %d, lost %d; want %d, %d to %d, lost %d", len(evs), evs[0].Seq, evs[len(evs)-1].Seq, r.Lost(), MaxPage+100, lost+1, MaxPage+150, lost)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("event %d after %d", evs[i].Seq, evs[i-1].Seq)
		}
	}
	// On the reader's clock, whose offset from the feed's may move by
	// microseconds between pages; the events are a millisecond apart.
	next := evs[0].At
	for _, tt := range []struct {
		from time.Time
		want uint64
	}{
		{base.Add(-time.Hour), lost},
		{next.Add(-time.Millisecond / 2), lost},
		{next.Add(time.Millisecond / 2), 0},
	} {
		if got := r.LostFrom(tt.from); got != tt.want {
			t.Errorf("LostFrom(the first event read %+v) = %d, want %d", tt.from.Sub(next), got, tt.want)
		}
	}
}

// TestHandlerRefuses: no token, a wrong one, another method, a bad
// query, an empty configured token.
func TestHandlerRefuses(t *testing.T) {
	tests := []struct {
		name, method, path, auth, token string
		want                            int
	}{
		{name: "no token", method: "GET", path: "/events", want: http.StatusUnauthorized},
		{name: "wrong token", method: "GET", path: "/events", auth: "Bearer nope", want: http.StatusUnauthorized},
		{name: "token as basic auth", method: "GET", path: "/events", auth: "Basic " + token, want: http.StatusUnauthorized},
		{name: "empty token configured", method: "GET", path: "/events", auth: "Bearer ", token: "-", want: http.StatusUnauthorized},
		{name: "POST", method: "POST", path: "/events", auth: "Bearer " + token, want: http.StatusMethodNotAllowed},
		{name: "bad after", method: "GET", path: "/events?after=-1", auth: "Bearer " + token, want: http.StatusBadRequest},
		{name: "bad max", method: "GET", path: "/events?max=-1", auth: "Bearer " + token, want: http.StatusBadRequest},
		{name: "after beyond everything", method: "GET", path: "/events?after=18446744073709551615", auth: "Bearer " + token, want: http.StatusOK},
		{name: "after past int64", method: "GET", path: "/events?after=9223372036854775808", auth: "Bearer " + token, want: http.StatusOK},
		{name: "other path", method: "GET", path: "/metrics", auth: "Bearer " + token, want: http.StatusNotFound},
		{name: "good", method: "GET", path: "/events?after=0&max=5", auth: "Bearer " + token, want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := token
			if tt.token == "-" {
				tok = ""
			}
			h := Handler(NewFeed(0), tok)
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Errorf("%s %s: %d %s, want %d", tt.method, tt.path, w.Code, strings.TrimSpace(w.Body.String()), tt.want)
			}
		})
	}
}

// TestPage: pages of a feed, at its edges.
func TestPage(t *testing.T) {
	feed := NewFeed(5)
	for range 8 {
		feed.Sent(time.Now(), 0)
	}
	seqs := func(p Page) []uint64 {
		var out []uint64
		for _, e := range p.Events {
			out = append(out, e.Seq)
		}
		return out
	}
	tests := []struct {
		after      uint64
		n          int
		want       []uint64
		next, lost uint64
	}{
		{after: 0, n: 10, want: []uint64{4, 5, 6, 7, 8}, next: 8, lost: 3},
		{after: 5, n: 2, want: []uint64{6, 7}, next: 7},
		{after: 8, n: 10, next: 8},
		{after: 9, n: 10, next: 8},          // beyond: the feed says where it is
		{after: ^uint64(0), n: 10, next: 8}, // no wrap-around
		{after: 3, n: 0, next: 3},           // a clock reading
		{after: 1 << 63, n: MaxPage, next: 8},
	}
	for _, tt := range tests {
		p := feed.page(tt.after, tt.n)
		if got := seqs(p); !slices.Equal(got, tt.want) || p.Next != tt.next || p.Lost != tt.lost {
			t.Errorf("page(%d, %d) = %v next %d lost %d; want %v next %d lost %d", tt.after, tt.n, got, p.Next, p.Lost, tt.want, tt.next, tt.lost)
		}
	}
}

// TestReaderRestart: when the client restarts, its new feed is read from
// its start, whether it holds fewer events than were read or more.
func TestReaderRestart(t *testing.T) {
	var mu sync.Mutex
	feed := NewFeed(0)
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		f := feed
		mu.Unlock()
		Handler(f, token).ServeHTTP(w, req)
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	// The reader's clock moves a nanosecond a reading: every round trip
	// is as short as the first, so only a reading taken anew for a new
	// feed can replace the old feed's clock offset.
	base, ticks := time.Now(), 0
	r := &Reader{URL: srv.URL, Token: token, Client: srv.Client(), Now: func() time.Time { ticks++; return base.Add(time.Duration(ticks)) }}
	restart := func(n int) {
		mu.Lock()
		defer mu.Unlock()
		feed = NewFeed(0)
		for range n {
			feed.Sent(time.Now(), 0)
		}
	}
	restart(5)
	if evs, err := r.Poll(t.Context()); err != nil || len(evs) != 5 {
		t.Fatalf("first feed: %d events, %v", len(evs), err)
	}
	for _, n := range []int{2, 9} { // fewer than read, then more
		restart(n)
		evs, err := r.Poll(t.Context())
		if err != nil || len(evs) != n || evs[0].Seq != 1 {
			t.Errorf("a new feed of %d: read %d events (%v), want all from 1", n, len(evs), err)
		}
	}
	// A restart on a node whose clock is an hour ahead: the new feed's
	// times are moved by its own clock, not the old one's.
	const skew = time.Hour
	mu.Lock()
	feed = NewFeed(0)
	feed.now = func() time.Time { return time.Now().Add(skew) }
	at := time.Now()
	feed.Sent(at.Add(skew), 0)
	mu.Unlock()
	evs, err := r.Poll(t.Context())
	if err != nil || len(evs) != 1 {
		t.Fatalf("a new feed an hour ahead: %d events, %v", len(evs), err)
	}
	if d := evs[0].At.Sub(at).Abs(); d > time.Second {
		t.Errorf("an event at %v read as %v, %v off: the old feed's clock offset was kept", at, evs[0].At, d)
	}
	if r.Restarts() != 3 {
		t.Errorf("Restarts = %d, want 3", r.Restarts())
	}
}

// TestReaderErrors: a refused token is an error naming the status.
func TestReaderErrors(t *testing.T) {
	r := serve(t, NewFeed(0))
	r.Token = "wrong"
	if _, err := r.Poll(t.Context()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Poll with a wrong token: %v, want 401", err)
	}
}

// TestReaderSmallerPages: a feed whose pages of more than 1000 events do
// not arrive before the read's context ends (a starved pod marshalling
// them, a slow port-forward) is still read whole, in order, as pages
// shrink; once full pages arrive in time again they grow back to MaxPage.
func TestReaderSmallerPages(t *testing.T) {
	const events, slowAbove = 3000, 1000
	feed := NewFeed(0)
	for range events {
		feed.Sent(time.Now(), 0)
	}
	var mu sync.Mutex
	slow := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, _ := strconv.Atoi(req.URL.Query().Get("max"))
		mu.Lock()
		s := slow
		mu.Unlock()
		if s && n > slowAbove {
			<-req.Context().Done() // never in time
			return
		}
		Handler(feed, token).ServeHTTP(w, req)
	}))
	defer srv.Close()
	r := &Reader{URL: srv.URL, Token: token, Client: srv.Client()}
	var got []Event
	for poll := 0; poll < 60 && len(got) < events; poll++ {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		evs, _ := r.Poll(ctx)
		cancel()
		got = append(got, evs...)
	}
	if len(got) != events {
		t.Fatalf("read %d of %d events in 60 reads (page size now %d)", len(got), events, r.PageSize())
	}
	for i, ev := range got {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d, want %d: read out of order or twice", i, ev.Seq, i+1)
		}
	}
	mu.Lock()
	slow = false
	mu.Unlock()
	const more = 40_000
	for range more {
		feed.Sent(time.Now(), 0)
	}
	evs, err := r.Poll(t.Context())
	if err != nil || len(evs) != more {
		t.Fatalf("a backlog of %d once pages arrive: read %d (%v)", more, len(evs), err)
	}
	if n := r.PageSize(); n != MaxPage {
		t.Errorf("page size %d after reading a backlog of %d in full pages, want MaxPage (%d)", n, more, MaxPage)
	}
}

// TestReaderPageSizeRules: a page shrinks only when it timed out as the
// first of its read, not when the read was cancelled nor when earlier
// pages of the read arrived; it grows only after a full page that came
// within a quarter of the time its read had left.
func TestReaderPageSizeRules(t *testing.T) {
	feed := NewFeed(0)
	var mu sync.Mutex
	mode := "fast"
	setMode := func(m string) {
		mu.Lock()
		defer mu.Unlock()
		mode = m
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		m := mode
		mu.Unlock()
		if req.URL.Query().Get("max") != "0" { // pages, not the clock
			switch m {
			case "hang":
				<-req.Context().Done()
				return
			case "slow":
				select {
				case <-time.After(600 * time.Millisecond):
				case <-req.Context().Done():
					return
				}
			}
		}
		Handler(feed, token).ServeHTTP(w, req)
	}))
	defer srv.Close()
	r := &Reader{URL: srv.URL, Token: token, Client: srv.Client()}
	var got []Event
	poll := func(ctx context.Context) {
		evs, _ := r.Poll(ctx)
		got = append(got, evs...)
	}
	poll(t.Context()) // the clock read, no events yet
	const events = 45_000
	for range events {
		feed.Sent(time.Now(), 0)
	}
	for _, step := range []struct {
		name, mode string
		ctx        func() (context.Context, context.CancelFunc)
		want       int
	}{
		{"the first page timed out", "hang", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 200*time.Millisecond)
		}, MaxPage / 4},
		{"the read cancelled", "hang", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, MaxPage / 4},
		// Pages of 600 ms in a read of 1.5 s: none within a quarter of
		// the time left, and the third times out after two arrived.
		{"slow full pages, then the read's time ran out", "slow", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 1500*time.Millisecond)
		}, MaxPage / 4},
	} {
		setMode(step.mode)
		ctx, cancel := step.ctx()
		poll(ctx)
		cancel()
		if n := r.PageSize(); n != step.want {
			t.Errorf("%s: page size %d, want %d", step.name, n, step.want)
		}
	}
	setMode("fast")
	poll(t.Context())
	if n := r.PageSize(); n != MaxPage {
		t.Errorf("after full pages that came at once: page size %d, want %d", n, MaxPage)
	}
	if len(got) != events {
		t.Fatalf("read %d events, want %d", len(got), events)
	}
	for i, ev := range got {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, i+1)
		}
	}
}
