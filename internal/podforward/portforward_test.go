package podforward_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podforward"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// TestMain checks for leaks, leaving out spdystream's shutdown goroutine:
// it outlives a Close whose connection had already failed by up to 1 s
// (moby/spdystream's connection.go), and client-go's port forwarder may
// close a connection from a goroutine it does not wait for
// (handleConnection, on a message on the error stream). The connections'
// own goroutines (Serve, the framer's monitor) are still checked.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).shutdown"))
}

// forwardAPI serves the pods/portforward subresource as kube-apiserver
// and a kubelet do, with k8s.io/cri-streaming's portforward behind
// k8s.io/apiserver's tunnelling handler (SPDY over WebSocket) or on its
// own (SPDY), forwarding every port to the same port on 127.0.0.1. It
// records each upgrade's method and pod, and can refuse WebSocket
// upgrades (an API server older than 1.30) or forbid the port-forward
// (RBAC).
type forwardAPI struct {
	refuseWebSocket, forbid bool

	mu       sync.Mutex
	upgrades []string       // "GET namespace/pod" (WebSocket) or "POST namespace/pod" (SPDY)
	conns    []net.Conn     // the sessions' TCP connections
	sessions sync.WaitGroup // the forwards' copies
	handlers sync.WaitGroup // the requests' handlers, which outlive their hijacked connections' server
}

func startForwardAPI(t *testing.T, api *forwardAPI) *rest.Config {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/{namespace}/pods/{pod}/portforward", api.serve)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(c net.Conn, state http.ConnState) {
		if state == http.StateHijacked {
			api.mu.Lock()
			api.conns = append(api.conns, c)
			api.mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		api.drop()
		api.sessions.Wait()
		api.handlers.Wait()
	})
	return &rest.Config{Host: srv.URL}
}

func (api *forwardAPI) serve(w http.ResponseWriter, r *http.Request) {
	api.handlers.Add(1)
	defer api.handlers.Done()
	ns, pod := r.PathValue("namespace"), r.PathValue("pod")
	api.mu.Lock()
	api.upgrades = append(api.upgrades, r.Method+" "+ns+"/"+pod)
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
		portforward.ServePortForward(&upgradeWriter{ResponseWriter: w}, r, api, pod, "", &portforward.V4Options{}, time.Minute, 10*time.Second, portforward.SupportedProtocols)
	})
	if tunnel {
		h = translator.NewTunnelingHandler(h)
	}
	h.ServeHTTP(w, r)
}

// PortForward copies between stream and port on 127.0.0.1 until either
// side ends, failing as the kubelet's (internal/kubeletapi's forwarder)
// only when the port's side fails: the stream's end is no error (one
// reported on the error stream makes client-go end the whole forward).
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
	_, err = io.Copy(stream, conn)
	conn.Close()
	stream.Close()
	return err
}

// drop closes every session's TCP connection, as an API server that
// restarts. (Closing the tunnelling handler's connection instead would
// wait for its pending read, up to the stream creation timeout.)
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
// tunnelling handler requires: a 101 through WriteHeader is refused).
type upgradeWriter struct {
	http.ResponseWriter
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

// startEcho serves on 127.0.0.1, as a pod's port: each connection is told
// the remote address the server sees, in a line, then echoed.
func startEcho(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := loopback.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				fmt.Fprintf(c, "%s\n", c.RemoteAddr())
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return loopback.AddrPort(l.Addr())
}

// echo exchanges a line with an echo server on c and returns the remote
// address the server saw.
func echo(c net.Conn) (string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	remote, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the remote address: %w", err)
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	if back, err := r.ReadString('\n'); err != nil || back != "ping\n" {
		return "", fmt.Errorf("echo %q, %v; want %q", back, err, "ping\n")
	}
	return strings.TrimSpace(remote), nil
}

// podIP is the pods' IP in these tests: nothing listens there, so that a
// dial that did not go through the forward fails.
var podIP = netip.MustParseAddr("127.203.214.9")

func onePod(ip netip.Addr) (string, string, bool) {
	return "shop", "pricing-0", ip == podIP
}

// dialWay is one of PortForward's dials, to pod shop/pricing-0 at podIP.
type dialWay struct {
	name string
	dial func(ctx context.Context, pf *podforward.PortForward, port uint16) (net.Conn, error)
}

var dialWays = []dialWay{
	{"by IP", func(ctx context.Context, pf *podforward.PortForward, port uint16) (net.Conn, error) {
		return pf.DialContext(ctx, netip.AddrPortFrom(podIP, port))
	}},
	{"by pod", func(ctx context.Context, pf *podforward.PortForward, port uint16) (net.Conn, error) {
		return pf.DialPod(ctx, "shop", "pricing-0", port)
	}},
}

// echoSoon dials with way and exchanges a line. After a dropped forward
// (retry) it tries every 5 ms until that works, within 2 x OpenTimeout:
// the dials that reach the forward before it noticed its end fail
// (refused, or closed when their stream cannot be opened), and the first
// after it opens a new forward. It returns the last try's connection,
// closed.
func echoSoon(pf *podforward.PortForward, way dialWay, port uint16, retry bool) (remote string, c net.Conn, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*podforward.OpenTimeout)
	defer cancel()
	labtest.Poll(ctx, 5*time.Millisecond, func() bool {
		if c, err = way.dial(ctx, pf, port); err == nil {
			remote, err = echo(c)
			c.Close()
		}
		return err == nil || !retry
	})
	return remote, c, err
}

// TestPortForward: both dials reach a pod's port through the API server's
// port-forward, one forward kept for every dial, the server seeing the
// forwarder's side rather than the dial's local address; SPDY is used
// when the API server refuses the WebSocket upgrade; a forward that ended
// is opened again; a Forbidden answer names the pod and the RBAC rule.
func TestPortForward(t *testing.T) {
	tests := []struct {
		name     string
		refuseWS bool
		forbid   bool
		drop     bool   // end the forwards after the first dial
		upgrades string // the upgrades the API server saw
		err      string
	}{
		{name: "WebSocket", upgrades: "GET shop/pricing-0"},
		{name: "SPDY when WebSocket is refused", refuseWS: true, upgrades: "GET shop/pricing-0 POST shop/pricing-0"},
		{name: "reopened", drop: true, upgrades: "GET shop/pricing-0 GET shop/pricing-0"},
		{name: "forbidden", forbid: true, upgrades: "GET shop/pricing-0 POST shop/pricing-0",
			err: `port-forward to pod shop/pricing-0 port %d: the API server forbids it (RBAC: the user needs create on pods/portforward in namespace "shop"; or run with --direct where pod IPs are routed): pods "pricing-0" is forbidden`},
	}
	for _, tt := range tests {
		for _, way := range dialWays {
			t.Run(tt.name+"/"+way.name, func(t *testing.T) {
				server := startEcho(t)
				api := &forwardAPI{refuseWebSocket: tt.refuseWS, forbid: tt.forbid}
				pf := &podforward.PortForward{Config: startForwardAPI(t, api), Pod: onePod}
				defer pf.Close()
				for dial := range 3 {
					if dial == 1 && tt.drop {
						api.drop()
					}
					remote, c, err := echoSoon(pf, way, server.Port(), dial == 1 && tt.drop)
					if tt.err != "" {
						if want := fmt.Sprintf(tt.err, server.Port()); err == nil || !strings.Contains(err.Error(), want) {
							t.Fatalf("error %v, want it to contain %q", err, want)
						}
						break
					}
					if err != nil {
						t.Fatalf("dial %d: %v", dial, err)
					}
					if remote == c.LocalAddr().String() {
						t.Errorf("dial %d: the server saw the dial's own address %s, want the forwarder's", dial, remote)
					}
				}
				if diff := cmp.Diff(tt.upgrades, strings.Join(api.methods(), " ")); diff != "" {
					t.Errorf("upgrades (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestPortForwardShared: DialContext and DialPod share the forward to a
// pod's port, another pod gets its own; when another pod has the IP
// DialContext opens a forward to it and ends the previous pod's, which
// DialPod then opens again.
func TestPortForwardShared(t *testing.T) {
	server := startEcho(t)
	api := &forwardAPI{}
	var (
		mu    sync.Mutex
		atPod = "pricing-0"
	)
	pf := &podforward.PortForward{Config: startForwardAPI(t, api), Pod: func(ip netip.Addr) (string, string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return "shop", atPod, ip == podIP
	}}
	defer pf.Close()
	ctx := context.Background()
	byIP := func() (net.Conn, error) { return pf.DialContext(ctx, netip.AddrPortFrom(podIP, server.Port())) }
	byPod := func(name string) func() (net.Conn, error) {
		return func() (net.Conn, error) { return pf.DialPod(ctx, "shop", name, server.Port()) }
	}
	steps := []struct {
		name     string
		dial     func() (net.Conn, error)
		moveTo   string // the pod that has podIP from this step on
		upgrades string // the upgrades after the step
	}{
		{name: "by IP", dial: byIP, upgrades: "GET shop/pricing-0"},
		{name: "the same pod by name", dial: byPod("pricing-0"), upgrades: "GET shop/pricing-0"},
		{name: "another pod by name", dial: byPod("pricing-1"), upgrades: "GET shop/pricing-0 GET shop/pricing-1"},
		{name: "pricing-2 at the IP", dial: byIP, moveTo: "pricing-2", upgrades: "GET shop/pricing-0 GET shop/pricing-1 GET shop/pricing-2"},
		{name: "pricing-0's forward ended", dial: byPod("pricing-0"), upgrades: "GET shop/pricing-0 GET shop/pricing-1 GET shop/pricing-2 GET shop/pricing-0"},
		{name: "pricing-1's kept", dial: byPod("pricing-1"), upgrades: "GET shop/pricing-0 GET shop/pricing-1 GET shop/pricing-2 GET shop/pricing-0"},
	}
	for _, st := range steps {
		if st.moveTo != "" {
			mu.Lock()
			atPod = st.moveTo
			mu.Unlock()
		}
		c, err := st.dial()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		_, err = echo(c)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.upgrades, strings.Join(api.methods(), " ")); diff != "" {
			t.Errorf("%s: upgrades (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestPortForwardRefused: the dials PortForward refuses before any
// upgrade.
func TestPortForwardRefused(t *testing.T) {
	api := &forwardAPI{}
	pf := &podforward.PortForward{Config: startForwardAPI(t, api), Pod: onePod}
	closed := &podforward.PortForward{Config: startForwardAPI(t, api), Pod: onePod}
	closed.Close()
	ctx := context.Background()
	tests := []struct {
		name string
		dial func() (net.Conn, error)
		err  string
	}{
		{name: "no pod has the IP", dial: func() (net.Conn, error) { return pf.DialContext(ctx, netip.MustParseAddrPort("127.203.214.10:8471")) },
			err: "port-forward: no pod has the IP 127.203.214.10"},
		{name: "no name", dial: func() (net.Conn, error) { return pf.DialPod(ctx, "shop", "", 8471) },
			err: "port-forward to pod shop/ port 8471: a namespace, a name and a port are required"},
		{name: "no namespace", dial: func() (net.Conn, error) { return pf.DialPod(ctx, "", "pricing-0", 8471) },
			err: "port-forward to pod /pricing-0 port 8471: a namespace, a name and a port are required"},
		{name: "no port", dial: func() (net.Conn, error) { return pf.DialPod(ctx, "shop", "pricing-0", 0) },
			err: "port-forward to pod shop/pricing-0 port 0: a namespace, a name and a port are required"},
		{name: "closed", dial: func() (net.Conn, error) { return closed.DialPod(ctx, "shop", "pricing-0", 8471) },
			err: "port-forward: closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.dial()
			if err == nil {
				c.Close()
			}
			if err == nil || err.Error() != tt.err {
				t.Errorf("error %v, want %q", err, tt.err)
			}
		})
	}
	pf.Close()
	if got := api.methods(); len(got) != 0 {
		t.Errorf("upgrades %v, want none", got)
	}
}
