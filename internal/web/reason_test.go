package web

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/load"
	"google.golang.org/grpc/codes"
)

// TestCloseReasons: the reason the HTTP/1.1 and WebSocket clients give
// for a closed connection is what they saw: their own close, or the
// server's (a FIN read as EOF; these clients see no GOAWAY).
func TestCloseReasons(t *testing.T) {
	tests := []struct {
		name string
		// run starts a client on s with obs, waits for a reply, and ends
		// its first connection.
		run  func(t *testing.T, s *Server, obs *collector)
		want []load.CloseReason // the reasons seen, each once
	}{{
		name: "HTTP client restart closes the old pool",
		run: func(t *testing.T, s *Server, obs *collector) {
			c, err := NewHTTPClient(HTTPConfig{Source: netip.MustParseAddr("127.206.7.1"), URL: "http://" + s.Addr().String(), Rate: 20, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.Run(ctx)
			}()
			defer func() {
				cancel()
				<-done
			}()
			waitFor(t, "a reply", func() bool { cs, _ := obs.snapshot(); return cs[codes.OK] > 0 })
			if err := c.Restart(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the old connection closed", func() bool { _, cl := obs.conns(); return cl >= 1 })
		},
		want: []load.CloseReason{load.ReasonClient},
	}, {
		name: "WebSocket server killed",
		run: func(t *testing.T, s *Server, obs *collector) {
			// A low rate leaves no message unread when the server closes,
			// which would make its kernel send RST rather than FIN.
			startWS(t, WSConfig{Source: netip.MustParseAddr("127.206.7.2"), URL: "http://" + s.Addr().String(), Rate: 2, Observer: obs})
			waitFor(t, "a reply", func() bool { cs, _ := obs.snapshot(); return cs[codes.OK] > 0 })
			s.Kill()
			waitFor(t, "the connection closed", func() bool { _, cl := obs.conns(); return cl >= 1 })
		},
		want: []load.CloseReason{load.ReasonEOF},
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, netip.AddrFrom4([4]byte{127, 244, 0, byte(81 + i)}).String(), 0, Config{})
			var obs collector
			tt.run(t, s, &obs)
			var got []load.CloseReason
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
