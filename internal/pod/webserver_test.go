package pod_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
)

// plainClient is an HTTP/1.1 client dialling from src.
func plainClient(t *testing.T, src string) *http.Client {
	t.Helper()
	d := loopback.Dialer{Source: netip.MustParseAddr(src)}
	var p http.Protocols
	p.SetHTTP1(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, _, a string) (net.Conn, error) { return d.DialContext(ctx, a) }}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestServerRoutes(t *testing.T) {
	rec := &podtest.Recorder{}
	s := podtest.StartWeb(t, "127.244.0.21", 0, pod.WebConfig{Observer: rec})
	base := "http://" + s.Addr().String()
	hc := plainClient(t, "127.206.0.1")
	tests := []struct {
		name       string
		method     string
		path       string
		wantStatus int
		wantRoute  string
		wantBody   string // substring
	}{
		{name: "price", method: "GET", path: "/v1/price?sku=a", wantStatus: 200, wantRoute: webapi.RoutePrice, wantBody: `"pod":"pod-127.244.0.21","podIp":"127.244.0.21","namespace":"shop","sku":"a"`},
		{name: "price without sku", method: "GET", path: "/v1/price", wantStatus: 400, wantRoute: webapi.RoutePrice, wantBody: `"error":"missing query parameter sku","pod":"pod-127.244.0.21"`},
		{name: "health", method: "GET", path: "/healthz", wantStatus: 200, wantRoute: webapi.RouteHealth, wantBody: "ok"},
		{name: "unknown path", method: "GET", path: "/nope", wantStatus: 404, wantRoute: webapi.RouteUnmatched},
		{name: "wrong method", method: "POST", path: "/v1/price?sku=a", wantStatus: 405, wantRoute: webapi.RouteUnmatched},
		{name: "watch without upgrade", method: "GET", path: "/v1/watch", wantStatus: 426, wantRoute: webapi.RouteWatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := rec.Count(tt.wantRoute, webapi.CodeOf(tt.wantStatus))
			req, _ := http.NewRequest(tt.method, base+tt.path, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || resp.Proto != "HTTP/1.1" || !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("%s %s = %s %d %q; want HTTP/1.1 %d containing %q", tt.method, tt.path, resp.Proto, resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			labtest.WaitFor(t, 10*time.Second, "the request observed", func() bool { return rec.Count(tt.wantRoute, webapi.CodeOf(tt.wantStatus)) == before+1 })
		})
	}
	if opened, _ := rec.Conns(); opened != 1 {
		t.Errorf("observer saw %d connections open; want 1 keep-alive connection for all requests", opened)
	}
}

// TestServerSpeaksOnlyHTTP1: a client that insists on HTTP/2 without TLS
// (h2c with prior knowledge) gets no answer.
func TestServerSpeaksOnlyHTTP1(t *testing.T) {
	s := podtest.StartWeb(t, "127.244.0.22", 0, pod.WebConfig{})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	ctx := labtest.Context(t, 5*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.Addr().String()+"/healthz", nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("h2c request got %s %d, want a failure", resp.Proto, resp.StatusCode)
	}
}

func TestServerReportsConnections(t *testing.T) {
	rec := &podtest.Recorder{}
	s := podtest.StartWeb(t, "127.244.0.23", 0, pod.WebConfig{Observer: rec})
	hc := plainClient(t, "127.206.0.2")
	for range 3 {
		resp, err := hc.Get("http://" + s.Addr().String() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	hc.Transport.(*http.Transport).CloseIdleConnections()
	labtest.WaitFor(t, 10*time.Second, "keep-alive connection reported closed", func() bool { o, c := rec.Conns(); return o == 1 && c == 1 })

	ws, _, err := websocket.Dial(context.Background(), "ws://"+s.Addr().String()+"/v1/watch", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "websocket connection reported open", func() bool { o, _ := rec.Conns(); return o == 2 })
	if _, c := rec.Conns(); c != 1 {
		t.Errorf("a hijacked connection was reported closed while its WebSocket is open")
	}
	ws.Close(websocket.StatusNormalClosure, "")
	labtest.WaitFor(t, 10*time.Second, "websocket connection reported closed", func() bool { _, c := rec.Conns(); return c == 2 })
}

func TestWebSocketReplies(t *testing.T) {
	rec := &podtest.Recorder{}
	s := podtest.StartWeb(t, "127.244.0.24", 0, pod.WebConfig{Observer: rec})
	ctx := labtest.Context(t, 10*time.Second)
	ws, _, err := websocket.Dial(ctx, "ws://"+s.Addr().String()+"/v1/watch", &websocket.DialOptions{HTTPClient: plainClient(t, "127.206.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	tests := []struct {
		name string
		send string
		want map[string]any
	}{
		{name: "json request", send: `{"id":5,"sku":"a"}`,
			want: map[string]any{"id": 5.0, "pod": "pod-127.244.0.24", "podIp": "127.244.0.24", "namespace": "shop", "sku": "a", "priceCents": float64(pod.PriceCents("a"))}},
		{name: "plain text is the sku", send: "b",
			want: map[string]any{"pod": "pod-127.244.0.24", "podIp": "127.244.0.24", "namespace": "shop", "sku": "b", "priceCents": float64(pod.PriceCents("b"))}},
		{name: "missing sku", send: `{"id":6}`,
			want: map[string]any{"id": 6.0, "error": "missing sku", "pod": "pod-127.244.0.24", "podIp": "127.244.0.24"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ws.Write(ctx, websocket.MessageText, []byte(tt.send)); err != nil {
				t.Fatal(err)
			}
			_, b, err := ws.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reply to %q (-want +got):\n%s", tt.send, diff)
			}
		})
	}
	// The server reports a message once its reply is written, which may
	// be after the client read it.
	labtest.WaitFor(t, 10*time.Second, "2 OK and 1 INVALID_ARGUMENT messages observed", func() bool {
		return rec.Count(webapi.RouteWatchMessage, codes.OK) == 2 && rec.Count(webapi.RouteWatchMessage, codes.InvalidArgument) == 1
	})
	ws.Write(ctx, websocket.MessageBinary, []byte{1})
	_, _, err = ws.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusUnsupportedData {
		t.Errorf("after a binary message, read returned %v (close status %v); want close 1003", err, got)
	}
}

// TestStopGoingAway: graceful Stop sends WebSockets close 1001, refuses new
// upgrades and lets an HTTP request in flight finish.
func TestStopGoingAway(t *testing.T) {
	rec := &podtest.Recorder{}
	s := podtest.StartWeb(t, "127.244.0.25", 0, pod.WebConfig{Observer: rec, ServiceTime: 300 * time.Millisecond})
	hc := plainClient(t, "127.206.0.4")
	ctx := labtest.Context(t, 10*time.Second)
	ws, _, err := websocket.Dial(ctx, "ws://"+s.Addr().String()+"/v1/watch", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	type reply struct {
		status int
		err    error
	}
	inflight := make(chan reply, 1)
	go func() {
		resp, err := hc.Get("http://" + s.Addr().String() + "/v1/price?sku=a")
		if err != nil {
			inflight <- reply{err: err}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		inflight <- reply{status: resp.StatusCode}
	}()
	labtest.WaitFor(t, 10*time.Second, "request in flight", func() bool { o, _ := rec.Conns(); return o == 2 })

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	_, _, err = ws.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
		t.Errorf("websocket read after Stop: %v (close status %v), want close 1001 going away", err, got)
	}
	if r := <-inflight; r.err != nil || r.status != 200 {
		t.Errorf("request in flight during Stop: status %d, %v; want 200", r.status, r.err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	if o, c := rec.Conns(); o != c {
		t.Errorf("observer saw %d connections open and %d closed after Stop; want equal", o, c)
	}
}

// TestKillClosesHard: Kill ends WebSockets without a close frame.
func TestKillClosesHard(t *testing.T) {
	s := podtest.StartWeb(t, "127.244.0.26", 0, pod.WebConfig{})
	ctx := labtest.Context(t, 10*time.Second)
	ws, _, err := websocket.Dial(ctx, "ws://"+s.Addr().String()+"/v1/watch", &websocket.DialOptions{HTTPClient: plainClient(t, "127.206.0.5")})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	s.Kill()
	_, _, err = ws.Read(ctx)
	if err == nil || websocket.CloseStatus(err) != -1 || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("websocket read after Kill: %v; want the connection lost without a close frame", err)
	}
}
