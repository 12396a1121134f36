package load

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/grpcconn"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
)

func TestReadCloseReason(t *testing.T) {
	readErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
	}
	tests := []struct {
		name   string
		err    error
		want   CloseReason
		wantOK bool
	}{
		{"EOF", io.EOF, ReasonEOF, true},
		{"wrapped EOF", fmt.Errorf("reading: %w", io.EOF), ReasonEOF, true},
		{"connection reset", readErr(syscall.ECONNRESET), ReasonReset, true},
		{"TCP timeout", readErr(syscall.ETIMEDOUT), ReasonReadError, true},
		{"deadline this side set", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ReadCloseReason(tt.err)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ReadCloseReason(%v) = %q, %v; want %q, %v", tt.err, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestWatchedConn: the first terminal event wins, whatever comes after.
func TestWatchedConn(t *testing.T) {
	goAway := stream(frame(http2.FrameSettings, 0, nil), goAwayFrame(http2.ErrCodeNo, "max_age"))
	tests := []struct {
		name string
		// server writes to the client's end of a pipe, then closes its own
		// end unless it returns false.
		server func(net.Conn) bool
		// closeFirst closes the client's end before it reads.
		closeFirst bool
		want       CloseReason
	}{
		{"GOAWAY, then EOF, then Close", func(c net.Conn) bool { c.Write(goAway); return true }, false, ReasonGoAwayMaxAge},
		{"EOF, then Close", func(net.Conn) bool { return true }, false, ReasonEOF},
		{"Close first", func(net.Conn) bool { return false }, true, ReasonClient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			w := newConnTable().watch(client)
			go func() {
				if tt.server(server) {
					server.Close()
				}
			}()
			if tt.closeFirst {
				w.Close()
			}
			buf := make([]byte, 4) // small reads split the frames
			for {
				if _, err := w.Read(buf); err != nil {
					break
				}
			}
			w.Close()
			got, goAway := w.reason()
			if got != tt.want {
				t.Errorf("reason() = %q, want %q", got, tt.want)
			}
			if isGoAway := strings.HasPrefix(string(got), "goaway"); isGoAway == goAway.IsZero() {
				t.Errorf("reason %q with GOAWAY time %v; want a time exactly for GOAWAYs", got, goAway)
			}
		})
	}
}

// TestConnTable: an entry lives from the dial until grpc-go reports the
// end, or until Close when grpc-go never reported it open.
func TestConnTable(t *testing.T) {
	ln, err := loopback.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dial := func(tab *connTable) (net.Conn, grpcconn.Conn) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := tab.dialer(loopback.Dialer{}.DialContext)(ctx, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c, grpcconn.Conn{Local: loopback.AddrPort(c.LocalAddr()), Remote: loopback.AddrPort(c.RemoteAddr())}
	}
	tests := []struct {
		name  string
		steps func(tab *connTable, c net.Conn, key grpcconn.Conn) CloseReason
		want  CloseReason
	}{
		{"reported open, closed by the client, reported closed", func(tab *connTable, c net.Conn, key grpcconn.Conn) CloseReason {
			tab.opened(key)
			c.Close()
			r, _ := tab.closed(key)
			return r
		}, ReasonClient},
		{"never reported open: Close forgets it", func(tab *connTable, c net.Conn, key grpcconn.Conn) CloseReason {
			c.Close()
			return ""
		}, ""},
		{"reported without a dial seen", func(tab *connTable, c net.Conn, key grpcconn.Conn) CloseReason {
			defer c.Close()
			r, _ := tab.closed(grpcconn.Conn{Local: key.Remote, Remote: key.Local})
			return r
		}, ReasonUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := newConnTable()
			c, key := dial(tab)
			got := tt.steps(tab, c, key)
			if got != tt.want {
				t.Errorf("reason = %q, want %q", got, tt.want)
			}
			if diff := cmp.Diff(0, len(tab.conns)); diff != "" {
				t.Errorf("entries left (-want +got):\n%s", diff)
			}
		})
	}
}

// trackingListener keeps the connections it accepts, so a test can close
// them behind the grpc-go server's back, as a killed process's kernel does.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// kill closes the listener and every accepted connection without a GOAWAY;
// with reset, SO_LINGER 0 makes each close send RST instead of FIN.
func (l *trackingListener) kill(reset bool) {
	l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if tc, ok := c.(*net.TCPConn); ok && reset {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

// TestCloseReasonsFromRealServers: what a load client reports when a real
// grpc-go server (or the client itself) ends its connection in each way.
func TestCloseReasonsFromRealServers(t *testing.T) {
	aged := []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: 200 * time.Millisecond, MaxConnectionAgeGrace: 200 * time.Millisecond,
	})}
	tests := []struct {
		name string
		opts []grpc.ServerOption
		// end ends the connection once it is up and has carried a call.
		end  func(b *backend, ln *trackingListener, stopClient func())
		want CloseReason
	}{
		{"MaxConnectionAge", aged, func(*backend, *trackingListener, func()) {}, ReasonGoAwayMaxAge},
		{"GracefulStop", nil, func(b *backend, _ *trackingListener, _ func()) { go b.srv.GracefulStop() }, ReasonGoAwayGracefulStop},
		{"Stop", nil, func(b *backend, _ *trackingListener, _ func()) { b.srv.Stop() }, ReasonEOF},
		{"killed: sockets closed", nil, func(_ *backend, ln *trackingListener, _ func()) { ln.kill(false) }, ReasonEOF},
		{"killed: sockets reset", nil, func(_ *backend, ln *trackingListener, _ func()) { ln.kill(true) }, ReasonReset},
		{"client stops", nil, func(_ *backend, _ *trackingListener, stopClient func()) { stopClient() }, ReasonClient},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner, err := loopback.Listen(context.Background(), "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := &trackingListener{Listener: inner}
			b := serveBackend(t, "p", ln, tt.opts...)
			obs := &collector{events: make(chan ConnEvent, 64)}
			src := netip.AddrFrom4([4]byte{127, 203, 70, byte(10 + i)})
			_, stop := start(t, Config{Source: src, Target: "passthrough:///" + b.addr.String(), Rate: 2, Observer: obs})
			labtest.WaitFor(t, 10*time.Second, "a call answered", func() bool { return count(obs.snapshot()).codes[codes.OK] > 0 })
			tt.end(b, ln, stop)
			want := []ConnEvent{{Remote: b.addr, Open: true}, {Remote: b.addr, Reason: tt.want}}
			got := []ConnEvent{nextEvent(t, obs.events), nextEvent(t, obs.events)}
			// A GOAWAY carries when it arrived (before the close is
			// reported); other closes carry no time.
			if at := got[1].GoAwayAt; strings.HasPrefix(string(tt.want), "goaway") && !at.IsZero() && at.Before(time.Now()) {
				got[1].GoAwayAt = time.Time{}
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("connection events (-want +got):\n%s", diff)
			}
		})
	}
}

// nextEvent waits up to 10 s for the next connection event.
func nextEvent(t *testing.T, events <-chan ConnEvent) ConnEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no connection event within 10s")
		return ConnEvent{}
	}
}
