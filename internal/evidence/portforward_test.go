package evidence_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/loopback"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// forwardAPI serves the pods/portforward subresource as kube-apiserver
// and a kubelet do, with k8s.io/cri-streaming's portforward behind
// k8s.io/apiserver's tunnelling handler (SPDY over WebSocket) or on its
// own (SPDY), forwarding every port to the same port on 127.0.0.1. It
// records each upgrade's method, and can refuse WebSocket upgrades (an API
// server older than 1.30) or forbid the port-forward (RBAC).
type forwardAPI struct {
	refuseWebSocket, forbid bool

	mu       sync.Mutex
	upgrades []string       // "GET" (WebSocket) or "POST" (SPDY)
	conns    []net.Conn     // the sessions' connections
	sessions sync.WaitGroup // the forwards' copies
}

func startForwardAPI(t *testing.T, api *forwardAPI) *rest.Config {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/{namespace}/pods/{pod}/portforward", api.serve)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		api.drop()
		api.sessions.Wait()
	})
	return &rest.Config{Host: srv.URL}
}

func (api *forwardAPI) serve(w http.ResponseWriter, r *http.Request) {
	ns, pod := r.PathValue("namespace"), r.PathValue("pod")
	api.mu.Lock()
	api.upgrades = append(api.upgrades, r.Method)
	api.mu.Unlock()
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	switch {
	case api.forbid:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
			Message: fmt.Sprintf(`pods %q is forbidden: User "bob" cannot create resource "pods/portforward" in API group "" in the namespace %q`, pod, ns)})
		return
	case tunnel && api.refuseWebSocket:
		http.Error(w, "websocket upgrades are not supported", http.StatusBadRequest)
		return
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		portforward.ServePortForward(&upgradeWriter{ResponseWriter: w, api: api}, r, api, pod, "", &portforward.V4Options{}, time.Minute, 10*time.Second, portforward.SupportedProtocols)
	})
	if tunnel {
		h = translator.NewTunnelingHandler(h)
	}
	h.ServeHTTP(w, r)
}

// PortForward copies between stream and port on 127.0.0.1 until either
// side ends.
func (api *forwardAPI) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	conn, err := loopback.Dialer{}.DialContext(ctx, fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	api.sessions.Add(1)
	go func() {
		defer api.sessions.Done()
		io.Copy(conn, stream)
		conn.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(stream, conn)
	conn.Close()
	return stream.Close()
}

// drop closes every session's connection, as an API server that restarts.
func (api *forwardAPI) drop() {
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, c := range api.conns {
		c.Close()
	}
	api.conns = nil
}

func (api *forwardAPI) methods() []string {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]string(nil), api.upgrades...)
}

// upgradeWriter answers an upgrade as kube-apiserver's upgrade-aware
// proxy does, on the connection its handler takes over (which the
// tunnelling handler requires: a 101 through WriteHeader is refused), and
// records that connection.
type upgradeWriter struct {
	http.ResponseWriter
	api     *forwardAPI
	upgrade bool
}

func (u *upgradeWriter) WriteHeader(code int) {
	if code == http.StatusSwitchingProtocols {
		u.upgrade = true
		return
	}
	u.ResponseWriter.WriteHeader(code)
}

func (u *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := u.ResponseWriter.(http.Hijacker).Hijack()
	if err != nil {
		return nil, nil, err
	}
	u.api.mu.Lock()
	u.api.conns = append(u.api.conns, c)
	u.api.mu.Unlock()
	if rw == nil {
		rw = bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
	}
	if u.upgrade {
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
		u.Header().Write(rw)
		rw.WriteString("\r\n")
		if err := rw.Flush(); err != nil {
			c.Close()
			return nil, nil, err
		}
	}
	return c, rw, nil
}

// podIP is the pods' IP in these tests: nothing listens there, so that a
// sample that did not go through the forward fails.
var podIP = netip.MustParseAddr("127.203.214.9")

func onePod(ip netip.Addr) (string, string, bool) {
	return "shop", "pricing-0", ip == podIP
}

// TestPortForward: the Channelz sampler reads a pod's server through the
// API server's port-forward, one forward kept for every reading, leaving
// out its own connection (which the server sees from the forwarder's side)
// and keeping another client's; SPDY is used when the API server refuses
// the WebSocket upgrade; a forward that ended is opened again; a Forbidden
// answer names the pod and the RBAC rule; an IP no pod has is refused.
func TestPortForward(t *testing.T) {
	t.Cleanup(func() { waitSPDYShutdown(t) })
	tests := []struct {
		name     string
		refuseWS bool
		forbid   bool
		drop     bool   // end the forwards after the first reading
		upgrades string // the upgrades the API server saw
		err      string
	}{
		{name: "WebSocket", upgrades: "GET"},
		{name: "SPDY when WebSocket is refused", refuseWS: true, upgrades: "GET POST"},
		{name: "reopened", drop: true, upgrades: "GET GET"},
		{name: "forbidden", forbid: true, upgrades: "GET POST",
			err: `port-forward to pod shop/pricing-0 port %d: the API server forbids it (RBAC: the user needs create on pods/portforward in namespace "shop"; or run with --direct where pod IPs are routed): pods "pricing-0" is forbidden`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := startChannelz(t)
			other := otherClient(t, server, 3)
			api := &forwardAPI{refuseWebSocket: tt.refuseWS, forbid: tt.forbid}
			cz := &evidence.Channelz{Dialer: &evidence.PortForward{Config: startForwardAPI(t, api), Pod: onePod}}
			defer cz.Close()
			addr := netip.AddrPortFrom(podIP, server.Port())
			for reading := range 3 {
				if reading == 1 && tt.drop {
					api.drop()
				}
				s, err := sampleSoon(cz, addr, reading == 1 && tt.drop)
				if tt.err != "" {
					if want := fmt.Sprintf(tt.err, server.Port()); err == nil || !strings.Contains(err.Error(), want) {
						t.Fatalf("error %v, want it to contain %q", err, want)
					}
					break
				}
				if err != nil {
					t.Fatalf("reading %d: %v", reading, err)
				}
				var remotes []string
				for _, sk := range s.Sockets {
					remotes = append(remotes, sk.Remote)
				}
				if len(remotes) != 1 || remotes[0] != other || s.Own.Started == 0 {
					t.Errorf("reading %d: sockets %v, own %+v; want only the other client's (%s) and the sampler's own calls counted", reading, remotes, s.Own, other)
				}
			}
			if diff := cmp.Diff(tt.upgrades, strings.Join(api.methods(), " ")); diff != "" {
				t.Errorf("upgrades (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("no such pod", func(t *testing.T) {
		cz := &evidence.Channelz{Dialer: &evidence.PortForward{Config: startForwardAPI(t, &forwardAPI{}), Pod: onePod}}
		defer cz.Close()
		_, err := cz.Sample(context.Background(), netip.MustParseAddrPort("127.203.214.10:8471"))
		if err == nil || !strings.Contains(err.Error(), "port-forward: no pod has the IP 127.203.214.10") {
			t.Errorf("error %v, want it to say no pod has the IP", err)
		}
	})
}

// waitSPDYShutdown waits, up to 5 s, until no spdystream connection is
// shutting down: its shutdown goroutine outlives a Close whose connection
// had already failed by up to 1 s (moby/spdystream's connection.go), and
// the leak check at the end of the tests must not take it for a leak.
func waitSPDYShutdown(t *testing.T) {
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("spdystream.(*Connection).shutdown")) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("a spdystream connection still shutting down after 5 s:\n%s", buf[:n])
			return
		}
	}
}

// sampleSoon samples addr; after a dropped forward (retry) it tries up to
// three times: grpc-go fails the calls on a transport that breaks under
// them (reset, EOF) before it reconnects through a new forward.
func sampleSoon(cz *evidence.Channelz, addr netip.AddrPort, retry bool) (evidence.Sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*evidence.SampleTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		s, err := cz.Sample(ctx, addr)
		if err == nil || !retry || attempt == 3 {
			return s, err
		}
	}
}
