package kubelet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// waitCount waits until rec counted route ending with code at least n
// times.
func waitCount(t *testing.T, rec *podtest.Recorder, route string, code codes.Code, n int) {
	t.Helper()
	counted := func() bool { return rec.Count(route, code) >= n }
	if labtest.Poll(labtest.Context(t, 10*time.Second), 5*time.Millisecond, counted) != nil {
		t.Fatalf("observer saw %v, want %q %v at least %d times", rec, route, code, n)
	}
}

// observers hands each pod its own observer.
type observers struct {
	mu   sync.Mutex
	pods map[string]*podtest.Recorder
}

func (o *observers) observe(p *corev1.Pod) pod.Observer { return o.of(p.Name) }

func (o *observers) of(name string) *podtest.Recorder {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pods == nil {
		o.pods = map[string]*podtest.Recorder{}
	}
	if o.pods[name] == nil {
		o.pods[name] = &podtest.Recorder{}
	}
	return o.pods[name]
}

// httpClient dials pods from source, one new connection per request.
func httpClient(t *testing.T, source netip.Addr) *http.Client {
	d := loopback.Dialer{Source: source}
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return d.DialContext(ctx, addr) },
		DisableKeepAlives: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// getQuote GETs /v1/price from base ("http://ip:port").
func getQuote(c *http.Client, base, sku string) (webapi.Quote, error) {
	resp, err := c.Get(base + "/v1/price?sku=" + sku)
	if err != nil {
		return webapi.Quote{}, err
	}
	defer resp.Body.Close()
	var q webapi.Quote
	if resp.StatusCode != http.StatusOK {
		return q, fmt.Errorf("status %s", resp.Status)
	}
	return q, json.NewDecoder(resp.Body).Decode(&q)
}

// dialWatch opens a WebSocket on base's /v1/watch and checks that one
// message is answered by pod.
func dialWatch(t *testing.T, c *http.Client, base, pod string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/watch", &websocket.DialOptions{HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"id":7,"sku":"a"}`)); err != nil {
		t.Fatal(err)
	}
	_, data, err := ws.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var q webapi.Quote
	if err := json.Unmarshal(data, &q); err != nil || q.ID != 7 || q.Pod != pod {
		t.Fatalf("WebSocket reply %s (%v), want a quote with id 7 from %s", data, err, pod)
	}
	return ws
}

// readClose reads ws until it ends and returns the close status the pod
// sent (-1: none). It fails the test if ws did not end in time.
func readClose(t *testing.T, ws *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("WebSocket still open after 15s: %v", err)
			}
			return websocket.CloseStatus(err)
		}
	}
}

func withHTTPPort(name string, port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: port})
	}
}

// TestWebPodServes: a pod with an HTTP port serves price requests and
// WebSockets naming itself beside gRPC, and its observer counts them.
func TestWebPodServes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		mod      func(*corev1.Pod)
		httpPort int
	}{
		{name: "http-port arg", mod: withArgs("--http-port=8080"), httpPort: 8080},
		{name: "containerPort named http", mod: withHTTPPort("http", 9090), httpPort: 9090},
		{name: "named port listed first", mod: func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Ports = append([]corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}, c.Ports...)
		}, httpPort: 8080},
		{name: "after the start-up delay", mod: withArgs("--http-port=8080", "--startup-delay=300ms"), httpPort: 8080},
	}
	obs := &observers{}
	c, _, _ := node(t, Config{Observe: obs.observe})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprint("web-", i)
			p := readyPod(t, c, name, tt.mod)
			hc := httpClient(t, clientSource(c))
			base := fmt.Sprintf("http://%s:%d", p.Status.PodIP, tt.httpPort)
			q, err := getQuote(hc, base, "a")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(webapi.Quote{Pod: name, PodIP: p.Status.PodIP, Namespace: "default", SKU: "a", PriceCents: q.PriceCents}, q); diff != "" {
				t.Errorf("quote (-want +got):\n%s", diff)
			}
			dialWatch(t, hc, base, name)
			resp, err := pricingv1.NewPricingClient(podtest.Dial(t, p.Status.PodIP+":8471", clientSource(c))).GetPrice(context.Background(), &pricingv1.GetPriceRequest{Sku: "a"})
			if err != nil || resp.GetPod() != name || resp.GetPriceCents() != q.PriceCents {
				t.Errorf("gRPC beside HTTP: %v, %v; want pod %s at %d cents", resp, err, name, q.PriceCents)
			}
			o := obs.of(name)
			waitCount(t, o, webapi.RoutePrice, codes.OK, 1)
			waitCount(t, o, webapi.RouteWatchMessage, codes.OK, 1)
			waitCount(t, o, "/pricing.v1.Pricing/GetPrice", codes.OK, 1)
		})
	}
}

// TestWebPodTermination: deleting a pod stops its web server gracefully
// within the grace period: its WebSocket gets close 1001 and a request in
// flight at SIGTERM completes. The request is a GET with a body sent in
// two parts: its handler has run, but net/http reads the rest of an unread
// body before it replies on a keep-alive connection, so the reply waits
// for the client, past SIGTERM.
func TestWebPodTermination(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	obs := &observers{}
	c, _, _ := node(t, Config{Events: events.record, Observe: obs.observe})
	p := readyPod(t, c, "drain", all(withGrace(5), withArgs("--http-port=8080")))
	source := clientSource(c)
	hc := httpClient(t, source)
	addr := p.Status.PodIP + ":8080"
	ws := dialWatch(t, hc, "http://"+addr, "drain")
	conn, err := loopback.Dialer{Source: source}.DialContext(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /v1/price?sku=inflight HTTP/1.1\r\nHost: drain\r\nContent-Length: 4\r\n\r\nab")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, obs.of("drain"), webapi.RoutePrice, codes.OK, 1)

	deletePod(t, c, "drain")
	if got := readClose(t, ws); got != websocket.StatusGoingAway {
		t.Fatalf("WebSocket closed with %v, want %v", got, websocket.StatusGoingAway)
	}
	if podtest.Connect(addr) != "refused" {
		t.Error("the HTTP port still accepts connections after SIGTERM")
	}
	if _, err := conn.Write([]byte("cd")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("request in flight at SIGTERM: %v", err)
	}
	defer resp.Body.Close()
	var q webapi.Quote
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || resp.StatusCode != http.StatusOK || q.Pod != "drain" {
		t.Errorf("request in flight at SIGTERM: %s, %+v (%v); want 200 with a quote from drain", resp.Status, q, err)
	}
	resp.Body.Close()
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the reply the connection gave %d bytes, %v; want it closed (EOF)", n, err)
	}
	waitGone(t, c, "drain")
	want := []string{"sigterm", "graceful-stop-done"}
	if got := events.names("drain"); !cmp.Equal(want, got) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestWebPodKill: Kill ends both servers at once (the WebSocket without a
// close frame, the gRPC stream UNAVAILABLE) and the restarted container
// serves HTTP again.
func TestWebPodKill(t *testing.T) {
	t.Parallel()
	c, k, _ := node(t, Config{})
	p := readyPod(t, c, "crash", withArgs("--http-port=8080"))
	source := clientSource(c)
	hc := httpClient(t, source)
	base := "http://" + p.Status.PodIP + ":8080"
	ws := dialWatch(t, hc, base, "crash")
	stream := watchPrices(t, podtest.Dial(t, p.Status.PodIP+":8471", source), 0)
	if err := k.Kill("default", "crash"); err != nil {
		t.Fatal(err)
	}
	if got := readClose(t, ws); got != -1 {
		t.Errorf("WebSocket on a killed pod closed with %v, want no close frame", got)
	}
	if err, _ := finish(stream); status.Code(err) != codes.Unavailable {
		t.Errorf("stream on a killed pod: %v, want UNAVAILABLE", err)
	}
	waitPod(t, c, "crash", "Ready after the restart", func(p *corev1.Pod, err error) bool {
		return err == nil && cluster.IsPodReady(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
	if q, err := getQuote(hc, base, "b"); err != nil || q.Pod != "crash" {
		t.Errorf("HTTP after the restart: %+v, %v; want a quote from crash", q, err)
	}
}

// TestWebPodHungIgnoresSIGTERM: a hung pod's web server keeps serving (the
// lab hangs only the gRPC server) but ignores SIGTERM like the rest of the
// process: deleting the pod ends its WebSocket only at the hard stop,
// without a close frame.
func TestWebPodHungIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	c, k, _ := node(t, Config{Events: events.record})
	p := readyPod(t, c, "stuck", all(withGrace(2), withArgs("--http-port=8080")))
	hc := httpClient(t, clientSource(c))
	base := "http://" + p.Status.PodIP + ":8080"
	ws := dialWatch(t, hc, base, "stuck")
	if err := k.Hang("default", "stuck", true); err != nil {
		t.Fatal(err)
	}
	if q, err := getQuote(hc, base, "a"); err != nil || q.Pod != "stuck" {
		t.Errorf("HTTP on a hung pod: %+v, %v; want a quote (only gRPC hangs)", q, err)
	}
	deletePod(t, c, "stuck")
	if got := readClose(t, ws); got != -1 {
		t.Errorf("WebSocket of a hung pod closed with %v, want no close frame (hard stop)", got)
	}
	waitGone(t, c, "stuck")
	want := []string{"hung", "sigterm", "hard-stop"}
	if got := events.names("stuck"); !cmp.Equal(want, got) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestHTTPGetProbe: an httpGet readiness probe at the pod's /healthz turns
// it Ready, probing from the node IP; at a path the server does not
// answer it keeps the pod not Ready.
func TestHTTPGetProbe(t *testing.T) {
	t.Parallel()
	probe := func(path string, port intstr.IntOrString) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: port}}}
		}
	}
	tests := []struct {
		name      string
		mod       func(*corev1.Pod)
		wantReady bool
		wantMsg   string
		// wantUnmatched: the probes reach the web server at a path it
		// does not serve.
		wantUnmatched bool
	}{
		{name: "healthz by port name", mod: all(withHTTPPort("http", 8080), probe("/healthz", intstr.FromString("http"))), wantReady: true},
		{name: "healthz by number", mod: all(withArgs("--http-port=8081"), probe("/healthz", intstr.FromInt32(8081))), wantReady: true},
		{name: "wrong path", mod: all(withArgs("--http-port=8080"), probe("/health", intstr.FromInt32(8080))),
			wantMsg: "readiness probe failed: HTTP probe failed with statuscode: 404", wantUnmatched: true},
		{name: "gRPC port", mod: all(withArgs("--http-port=8080"), probe("/healthz", intstr.FromInt32(8471))),
			wantMsg: "readiness probe failed:"},
	}
	obs := &observers{}
	c, _, _ := node(t, Config{Observe: obs.observe})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprint("probe-", i)
			if tt.wantReady {
				readyPod(t, c, name, tt.mod)
				peers := obs.of(name).Peers(webapi.RouteHealth)
				if len(peers) == 0 || peers[0] != netip.MustParseAddr("127.0.0.1") {
					t.Errorf("/healthz requests from %v, want them from the node IP 127.0.0.1", peers)
				}
				return
			}
			createPod(t, c, name, tt.mod)
			p := waitPod(t, c, name, tt.wantMsg, func(p *corev1.Pod, err error) bool {
				return err == nil && strings.Contains(p.Status.Message, tt.wantMsg)
			})
			if cluster.IsPodReady(p) {
				t.Error("pod is Ready, want not Ready")
			}
			if tt.wantUnmatched {
				// Three probes answered 404: still not Ready.
				waitCount(t, obs.of(name), webapi.RouteUnmatched, codes.NotFound, 3)
			}
			p = waitPod(t, c, name, "status", func(_ *corev1.Pod, err error) bool { return err == nil })
			if cluster.IsPodReady(p) {
				t.Errorf("pod turned Ready (%s)", p.Status.Message)
			}
		})
	}
}
