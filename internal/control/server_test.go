package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
)

// openConns returns how many connections the server holds, and how many
// of them have a request in progress.
func (s *Server) openConns() (open, busy int) {
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	for _, st := range s.ln.conns {
		if st.busy {
			busy++
		}
	}
	return len(s.ln.conns), busy
}

// TestShutdownAnswersStopping: once Shutdown has begun, a request that has
// not acted on the lab gets 503 "stopping" (while the lab is still up).
func TestShutdownAnswersStopping(t *testing.T) {
	srv, tokenFile := listen(t, Config{})
	srv.Serve(sharedLab(t))
	token, _ := ReadToken(tokenFile)
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A scale request but its body's last byte: the handler waits for it.
	fmt.Fprintf(c, "POST /v1/scale HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		srv.Addr(), token, len(scaleBody), scaleBody[:len(scaleBody)-1])
	labtest.WaitFor(t, 10*time.Second, "the request in progress", func() bool {
		_, busy := srv.openConns()
		return busy == 1
	})

	stopped := make(chan error, 1)
	go func() { stopped <- srv.Shutdown(labtest.Context(t, 30*time.Second)) }()
	labtest.WaitFor(t, 10*time.Second, "shutdown begun", func() bool {
		c, err := net.Dial("tcp", srv.Addr())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	io.WriteString(c, scaleBody[len(scaleBody)-1:])
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "stopping") {
		t.Errorf("during shutdown: %s %s, want 503 stopping", resp.Status, body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// dialIdle opens n connections to addr that send nothing, closed when the
// test ends.
func dialIdle(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

// closedByServer reports whether the server closed c before deadline
// (reading gets EOF or a reset).
func closedByServer(c net.Conn, deadline time.Time) bool {
	c.SetReadDeadline(deadline)
	_, err := c.Read(make([]byte, 1))
	var nerr net.Error
	return err != nil && !(errors.As(err, &nerr) && nerr.Timeout())
}

// TestIdleConnections: idle connections, which any local user can open,
// neither take more than MaxConns file descriptors nor keep a token holder
// out; the server closes them after its read-header and idle timeouts.
func TestIdleConnections(t *testing.T) {
	t.Run("a token holder is served past hundreds of idle connections", func(t *testing.T) {
		// Timeouts far beyond the test, so only the cap frees room.
		srv, tokenFile := listen(t, Config{MaxConns: 8, ReadHeaderTimeout: time.Hour, IdleTimeout: time.Hour})
		srv.Serve(sharedLab(t))
		dialIdle(t, srv.Addr(), 300)
		ctx := labtest.Context(t, 60*time.Second)
		if _, err := (&Client{Addr: srv.Addr(), TokenFile: tokenFile}).Info(ctx); err != nil {
			t.Fatalf("Info past 300 idle connections: %v", err)
		}
		if n, _ := srv.openConns(); n > 8 {
			t.Errorf("%d connections open, want at most MaxConns 8", n)
		}
	})
	t.Run("connections that send nothing are closed", func(t *testing.T) {
		srv, _ := listen(t, Config{ReadHeaderTimeout: 50 * time.Millisecond})
		for i, c := range dialIdle(t, srv.Addr(), 20) {
			if !closedByServer(c, time.Now().Add(30*time.Second)) {
				t.Fatalf("idle connection %d still open after 30s", i)
			}
		}
	})
	t.Run("keep-alive connections are closed when idle", func(t *testing.T) {
		srv, tokenFile := listen(t, Config{IdleTimeout: 50 * time.Millisecond})
		srv.Serve(sharedLab(t))
		token, _ := ReadToken(tokenFile)
		c := dialIdle(t, srv.Addr(), 1)[0]
		fmt.Fprintf(c, "GET /v1/info HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", srv.Addr(), token)
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("%s (close %v), want 200 on a kept-alive connection", resp.Status, resp.Close)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := r.ReadByte(); err == nil || os.IsTimeout(err) {
			t.Errorf("kept-alive connection still open after 30s: %v", err)
		}
	})
}

// TestClientToken: the client sends the token from its file, and says
// what is wrong when the lab refuses it.
func TestClientToken(t *testing.T) {
	srv, tokenFile := listen(t, Config{})
	l := sharedLab(t)
	srv.Serve(l)
	other := filepath.Join(t.TempDir(), "other")
	if err := WriteToken(other, NewToken(), true); err != nil {
		t.Fatal(err)
	}
	ctx := labtest.Context(t, 30*time.Second)

	c := &Client{Addr: srv.Addr(), TokenFile: tokenFile}
	if err := c.Scale(ctx, ScaleRequest{Kind: "Deployment", Namespace: "shop", Name: "pricing", Replicas: new(int32(1))}); err != nil {
		t.Errorf("Scale: %v", err)
	}
	pod := Snapshot(l).Pods[0]
	if err := c.SetReady(ctx, pod.Namespace, pod.Name, true); err != nil {
		t.Errorf("SetReady: %v", err)
	}
	if _, err := c.Objects(ctx); err != nil {
		t.Errorf("Objects: %v", err)
	}

	tests := []struct {
		name, tokenFile, want string
	}{
		{name: "no token file", tokenFile: filepath.Join(t.TempDir(), "none"), want: "so nothing was sent"},
		{name: "another lab's token", tokenFile: other, want: "refused the token in " + other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := (&Client{Addr: srv.Addr(), TokenFile: tt.tokenFile}).Info(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Info = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestClientTrustsNoStranger: without a token the client sends nothing
// (another local user may hold the address while the lab is down), and a
// server that is not the lab cannot make it read without end (issue 15's
// tester: a fake endpoint's 300 MB reply took 870 MB).
func TestClientTrustsNoStranger(t *testing.T) {
	var requests atomic.Int32
	fake := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set(Header, "v1")
		io.WriteString(w, `{"pods": [`)
		chunk := strings.Repeat(`{"name": "x"},`, 1<<12)
		for range 8 * maxReply / len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}))
	fake.Listener.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake.Listener = ln
	fake.Start()
	defer fake.Close()
	addr := ln.Addr().String()
	ctx := labtest.Context(t, 30*time.Second)

	_, err = (&Client{Addr: addr, TokenFile: filepath.Join(t.TempDir(), "none")}).Objects(ctx)
	if err == nil || requests.Load() != 0 {
		t.Errorf("without a token: %v, %d requests sent; want an error and none", err, requests.Load())
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := WriteToken(tokenFile, NewToken(), true); err != nil {
		t.Fatal(err)
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = (&Client{Addr: addr, TokenFile: tokenFile}).Objects(ctx)
	if err == nil {
		t.Errorf("a reply past %d bytes was taken", maxReply)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 6*maxReply {
		t.Errorf("reading the reply allocated %d MB", grew>>20)
	}
}

// TestListenRefusesNoToken: an API without a token cannot be started.
func TestListenRefusesNoToken(t *testing.T) {
	for _, token := range []string{"", "short"} {
		if srv, err := Listen(context.Background(), Config{Addr: "127.0.0.1:0", Token: token}); err == nil {
			srv.Shutdown(context.Background())
			t.Errorf("Listen with token %q served", token)
		}
	}
}
