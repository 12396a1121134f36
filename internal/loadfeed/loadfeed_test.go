package loadfeed

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
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
// are counted; paging reads more than one page.
func TestFullBuffer(t *testing.T) {
	feed := NewFeed(MaxPage + 100)
	for range MaxPage + 150 {
		feed.Sent(time.Now(), 0)
	}
	r := serve(t, feed)
	evs, err := r.Poll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lost := (MaxPage + 100) / 10
	if r.Lost() != uint64(lost) || len(evs) != MaxPage+150-lost || evs[0].Seq != uint64(lost+1) {
		t.Errorf("read %d events from %d, lost %d; want %d from %d, lost %d", len(evs), evs[0].Seq, r.Lost(), MaxPage+150-lost, lost+1, lost)
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
		{name: "bad max", method: "GET", path: "/events?max=0", auth: "Bearer " + token, want: http.StatusBadRequest},
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

// TestReaderErrors: a refused token is an error naming the status.
func TestReaderErrors(t *testing.T) {
	r := serve(t, NewFeed(0))
	r.Token = "wrong"
	if _, err := r.Poll(t.Context()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Poll with a wrong token: %v, want 401", err)
	}
}
