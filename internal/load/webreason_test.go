package load

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"google.golang.org/grpc/codes"
)

// TestWebCloseReasons: the reason the HTTP/1.1 and WebSocket clients give
// for a closed connection is what they saw: their own close, or the
// server's (a FIN read as EOF; these clients see no GOAWAY).
func TestWebCloseReasons(t *testing.T) {
	tests := []struct {
		name string
		// run starts a client on s with obs, waits for a reply, and ends
		// its first connection.
		run  func(t *testing.T, s *pod.WebServer, obs *collector)
		want []CloseReason // the reasons seen, each once
	}{{
		name: "HTTP client restart closes the old pool",
		run: func(t *testing.T, s *pod.WebServer, obs *collector) {
			c, err := NewHTTPClient(HTTPConfig{Source: netip.MustParseAddr("127.206.7.1"), URL: "http://" + s.Addr().String(), Rate: 20, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			stop := labtest.Run(t, c.Run)
			defer func() {
				stop()
				c.Close()
			}()
			labtest.WaitFor(t, 10*time.Second, "a reply", func() bool { return count(obs.snapshot()).codes[codes.OK] > 0 })
			if err := c.Restart(); err != nil {
				t.Fatal(err)
			}
			labtest.WaitFor(t, 10*time.Second, "the old connection closed", func() bool { _, cl := obs.conns(); return cl >= 1 })
		},
		want: []CloseReason{ReasonClient},
	}, {
		name: "WebSocket server killed",
		run: func(t *testing.T, s *pod.WebServer, obs *collector) {
			// A low rate leaves no message unread when the server closes,
			// which would make its kernel send RST rather than FIN.
			startWS(t, WSConfig{Source: netip.MustParseAddr("127.206.7.2"), URL: "http://" + s.Addr().String(), Rate: 2, Observer: obs})
			labtest.WaitFor(t, 10*time.Second, "a reply", func() bool { return count(obs.snapshot()).codes[codes.OK] > 0 })
			s.Kill()
			labtest.WaitFor(t, 10*time.Second, "the connection closed", func() bool { _, cl := obs.conns(); return cl >= 1 })
		},
		want: []CloseReason{ReasonEOF},
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := podtest.StartWeb(t, netip.AddrFrom4([4]byte{127, 244, 0, byte(81 + i)}).String(), 0, pod.WebConfig{})
			var obs collector
			tt.run(t, s, &obs)
			var got []CloseReason
			for r := range obs.closeReasons() {
				got = append(got, r)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("close reasons (-want +got):\n%s", diff)
			}
		})
	}
}
