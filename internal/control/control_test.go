package control

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// rawServer accepts connections and writes reply (maybe nothing) before
// closing each, until the test ends.
func rawServer(t *testing.T, reply string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, reply)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestClientErrors: the client says what it found at the address.
func TestClientErrors(t *testing.T) {
	starting, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { starting.Shutdown(context.Background()) })
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(web.Close)
	html := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(html.Close)

	tests := []struct {
		name string
		addr string
		want string
	}{
		{name: "nothing listens", addr: closedAddr(t), want: "no lab answers at"},
		{name: "an HTTP server with an empty 200", addr: strings.TrimPrefix(web.URL, "http://"), want: "not a pinlab lab control endpoint"},
		{name: "an HTTP server with 404", addr: strings.TrimPrefix(html.URL, "http://"), want: "answers HTTP (404 Not Found) but is not a pinlab lab control endpoint"},
		{name: "a server that closes at once", addr: rawServer(t, ""), want: "is not a pinlab lab control endpoint"},
		{name: "a server that speaks another protocol", addr: rawServer(t, "SSH-2.0-OpenSSH\r\n"), want: "is not a pinlab lab control endpoint"},
		{name: "a lab still starting", addr: starting.Addr(), want: "the lab is still starting"},
		{name: "not loopback", addr: "192.0.2.1:7471", want: "pinlab only uses 127.0.0.0/8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := (&Client{Addr: tt.addr}).Info(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Info = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
