// Package podforward dials pods' ports through the API server's
// port-forward, as kubectl port-forward does: PortForward, by pod IP (a
// Dialer of evidence's Channelz sampler) or by namespace and name.
package podforward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	constants "k8s.io/apimachinery/pkg/util/portforward"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/websocket"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	streamspdy "k8s.io/streaming/pkg/httpstream/spdy"
)

// OpenTimeout bounds opening a pod's port-forward: the API server's
// WebSocket upgrade (connect, proxy, TLS and its answer) and, when it
// refuses that one, the SPDY upgrade's connect and TLS.
const OpenTimeout = 10 * time.Second

// PortForward is a dialer that reaches pods through the API server's
// pods/portforward subresource, as kubectl port-forward does
// (k8s.io/kubectl/pkg/cmd/portforward over client-go v0.37's
// tools/portforward): SPDY tunnelled over a WebSocket, falling back to
// SPDY when the API server or a proxy refuses the WebSocket upgrade, with
// Config's credentials (exec plugins included), proxy and TLS. Each
// forward listens on 127.0.0.1, on a port the kernel picks, and
// DialContext (a pod by IP) and DialPod (a pod by namespace and name)
// connect there.
//
// One forward per pod and port, shared by both dials, opened at the first
// dial (within OpenTimeout) and kept for later dials until Close; one that
// ended (its pod gone, the API server's connection lost) is opened again
// at the next dial. When DialContext finds another pod at an IP than it
// found before, that pod gets a forward of its own and the previous pod's
// forward to that port is ended. A pod deleted and created again under
// the same name keeps the forward it had until that forward ends. Errors
// name the pod and say when the API server forbids the port-forward (RBAC:
// create pods/portforward) or refuses the credentials. The server sees
// the connection coming from the kubelet or the container runtime, not
// from the dial's local address: Relayed reports true. Safe for
// concurrent use.
type PortForward struct {
	// Config reaches the API server (evidence.Kube's Config, for one);
	// required.
	Config *rest.Config
	// Pod returns the namespace and name of the pod whose IP is ip, ok
	// false when no pod has it (evidence.Kube's PodByIP, for one);
	// required by DialContext, unused by DialPod.
	Pod func(ip netip.Addr) (namespace, name string, ok bool)

	mu       sync.Mutex
	closed   bool
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	client   *corev1client.CoreV1Client
	forwards map[target]*forward
	atIP     map[netip.AddrPort]target // the pod DialContext last found at each IP, with the port
	wg       sync.WaitGroup            // the forwards' goroutines
}

// target is what a forward reaches: one pod's port.
type target struct {
	namespace, name string
	port            uint16
}

// forward is one pod's port-forward, served by a goroutine of its
// PortForward until ctx ends or its connection to the API server does.
type forward struct {
	target
	fw     *portforward.PortForwarder
	dialer *openDialer
	ready  chan struct{} // closed once it listens
	done   chan struct{} // closed when it ended, err set
	err    error
	cancel context.CancelFunc
}

// Relayed reports true: the pod's server sees the kubelet's side.
func (pf *PortForward) Relayed() bool { return true }

// DialContext connects to the pod whose IP is addr's (Pod tells which)
// through its forward to addr's port, opening the forward if need be
// (bounded by OpenTimeout and ctx).
func (pf *PortForward) DialContext(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	ns, name, ok := pf.Pod(addr.Addr())
	if !ok {
		return nil, fmt.Errorf("port-forward: no pod has the IP %s", addr.Addr())
	}
	return pf.dial(ctx, target{namespace: ns, name: name, port: addr.Port()}, addr)
}

// DialPod connects to port of the pod namespace/name through its forward,
// opening the forward if need be (bounded by OpenTimeout and ctx). The
// namespace, the name and the port are required.
func (pf *PortForward) DialPod(ctx context.Context, namespace, name string, port uint16) (net.Conn, error) {
	if namespace == "" || name == "" || port == 0 {
		return nil, fmt.Errorf("port-forward to pod %s/%s port %d: a namespace, a name and a port are required", namespace, name, port)
	}
	return pf.dial(ctx, target{namespace: namespace, name: name, port: port}, netip.AddrPort{})
}

// dial connects to t through its forward; addr is the pod's IP and port
// when DialContext found t there, else invalid.
func (pf *PortForward) dial(ctx context.Context, t target, addr netip.AddrPort) (net.Conn, error) {
	f, err := pf.forward(t, addr)
	if err != nil {
		return nil, err
	}
	local, err := f.wait(ctx)
	if err != nil {
		return nil, err
	}
	return loopback.Dialer{}.DialContext(ctx, local.String())
}

// forward returns the running forward to t, or starts one. A valid addr
// records t as the pod at addr, ending the forward to the pod found
// there before if it was another.
func (pf *PortForward) forward(t target, addr netip.AddrPort) (*forward, error) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.closed {
		return nil, errors.New("port-forward: closed")
	}
	if pf.ctx == nil {
		client, err := corev1client.NewForConfig(pf.Config)
		if err != nil {
			return nil, fmt.Errorf("port-forward: %w", err)
		}
		pf.client, pf.forwards, pf.atIP = client, map[target]*forward{}, map[netip.AddrPort]target{}
		pf.ctx, pf.cancel = context.WithCancel(context.Background())
	}
	if addr.IsValid() {
		if before, ok := pf.atIP[addr]; ok && before != t {
			if f := pf.forwards[before]; f != nil {
				f.cancel() // another pod has the IP now
				delete(pf.forwards, before)
			}
		}
		pf.atIP[addr] = t
	}
	if f := pf.forwards[t]; f != nil && !f.ended() {
		return f, nil
	}
	ctx, cancel := context.WithCancel(pf.ctx)
	f := &forward{target: t, ready: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	u := pf.client.RESTClient().Post().Resource("pods").Namespace(t.namespace).Name(t.name).SubResource("portforward").URL()
	var err error
	if f.dialer, err = newOpenDialer(ctx, pf.Config, u); err == nil {
		f.fw, err = portforward.NewOnAddressesForStreamingWithContext(ctx, f.dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", f.port)}, f.ready, nil, nil)
	}
	if err != nil {
		cancel()
		return nil, f.errorf(err)
	}
	pf.forwards[t] = f
	pf.wg.Add(1)
	go func() {
		defer pf.wg.Done()
		defer close(f.done)
		defer cancel()
		err := f.fw.ForwardPorts()
		if f.dialer.err != nil {
			err = f.dialer.err // typed, where ForwardPorts keeps only its text
		}
		f.err = f.errorf(err)
	}()
	return f, nil
}

// Close ends every forward and waits for their goroutines, at most
// OpenTimeout: the SPDY fallback's read of the API server's answer is
// client-go's and has no deadline (as in kubectl), so a server that
// accepted the connection and never answers leaves that one goroutine
// (and a waiter) until it does or the process exits, rather than hanging
// Close and with it Ctrl-C.
func (pf *PortForward) Close() error {
	pf.mu.Lock()
	pf.closed = true
	if pf.cancel != nil {
		pf.cancel()
	}
	pf.mu.Unlock()
	done := make(chan struct{})
	go func() { pf.wg.Wait(); close(done) }()
	t := time.NewTimer(OpenTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	return nil
}

func (f *forward) ended() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// wait returns the forward's local address once it listens.
func (f *forward) wait(ctx context.Context) (netip.AddrPort, error) {
	t := time.NewTimer(OpenTimeout)
	defer t.Stop()
	select {
	case <-f.ready:
		if f.ended() {
			return netip.AddrPort{}, f.err
		}
		ports, err := f.fw.GetPorts()
		if err != nil || len(ports) == 0 {
			return netip.AddrPort{}, f.errorf(fmt.Errorf("no local port: %v", err))
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), ports[0].Local), nil
	case <-f.done:
		return netip.AddrPort{}, f.err
	case <-ctx.Done():
		return netip.AddrPort{}, f.errorf(fmt.Errorf("not open yet: %w", ctx.Err()))
	case <-t.C:
		return netip.AddrPort{}, f.errorf(fmt.Errorf("not open after %v", OpenTimeout))
	}
}

// errorf explains err, naming the pod and what the API server refused.
func (f *forward) errorf(err error) error {
	if err == nil {
		return fmt.Errorf("port-forward to pod %s/%s port %d: ended", f.namespace, f.name, f.port)
	}
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("port-forward to pod %s/%s port %d: the API server forbids it (RBAC: the user needs create on pods/portforward in namespace %q; or run with --direct where pod IPs are routed): %w", f.namespace, f.name, f.port, f.namespace, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("port-forward to pod %s/%s port %d: the API server refused the kubeconfig's credentials (expired?): %w", f.namespace, f.name, f.port, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("port-forward to pod %s/%s port %d: the API server has no such pod (deleted?): %w", f.namespace, f.name, f.port, err)
	}
	return fmt.Errorf("port-forward to pod %s/%s port %d: %w", f.namespace, f.name, f.port, err)
}

// openDialer is kubectl port-forward's dialer (tools/portforward's
// fallback from SPDY over WebSocket to SPDY, on an upgrade failure or a
// proxy the WebSocket dialer cannot use) with OpenTimeout on the upgrade,
// which client-go's dialers take no context for; err keeps the last
// upgrade's error.
type openDialer struct {
	ctx      context.Context // the forward's
	fallback streamhttp.Dialer
	open     context.Context // valid during Dial
	err      error
}

func newOpenDialer(ctx context.Context, cfg *rest.Config, u *url.URL) (*openDialer, error) {
	d := &openDialer{ctx: ctx}
	wsTransport, holder, err := websocket.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	tunnel := dialFunc(func(protocols ...string) (streamhttp.Connection, string, error) {
		return tunnelUpgrade(d.open, u, wsTransport, holder, protocols)
	})
	plain := dialFunc(func(protocols ...string) (streamhttp.Connection, string, error) {
		return spdyUpgrade(d.open, cfg, u, protocols)
	})
	d.fallback = portforward.NewFallbackDialerForStreaming(tunnel, plain, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	return d, nil
}

func (d *openDialer) Dial(protocols ...string) (streamhttp.Connection, string, error) {
	open, cancel := context.WithTimeout(d.ctx, OpenTimeout)
	defer cancel()
	d.open = open
	conn, protocol, err := d.fallback.Dial(protocols...)
	d.err = err
	return conn, protocol, err
}

// dialFunc is a streamhttp.Dialer.
type dialFunc func(protocols ...string) (streamhttp.Connection, string, error)

func (f dialFunc) Dial(protocols ...string) (streamhttp.Connection, string, error) {
	return f(protocols...)
}

// tunnelUpgrade is client-go's SPDY-over-WebSocket upgrade
// (tools/portforward's tunneling dialer) with the request bound to ctx:
// gorilla's dialer puts ctx's deadline on the whole handshake.
func tunnelUpgrade(ctx context.Context, u *url.URL, rt http.RoundTripper, holder websocket.ConnectionHolder, protocols []string) (streamhttp.Connection, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	tunneling := make([]string, len(protocols))
	for i, p := range protocols {
		tunneling[i] = constants.WebsocketsSPDYTunnelingPrefix + p
	}
	ws, err := websocket.Negotiate(rt, holder, req, tunneling...)
	if err != nil {
		return nil, "", err
	}
	conn, err := streamspdy.NewClientConnectionWithPings(portforward.NewTunnelingConnection("client", ws), portforward.PingPeriod)
	if err != nil {
		ws.Close()
		return nil, "", err
	}
	return conn, strings.TrimPrefix(ws.Subprotocol(), constants.WebsocketsSPDYTunnelingPrefix), nil
}

// spdyUpgrade is client-go's SPDY upgrade (transport/spdy's
// RoundTripperFor and Negotiate, POST as kubectl) with the request bound
// to ctx, and a refusal returned as the API server's Status (a
// *StatusError: Forbidden, Unauthorized, NotFound).
func spdyUpgrade(ctx context.Context, cfg *rest.Config, u *url.URL, protocols []string) (streamhttp.Connection, string, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, "", err
	}
	proxy := http.ProxyFromEnvironment
	if cfg.Proxy != nil {
		proxy = cfg.Proxy
	}
	upgrader, err := streamspdy.NewRoundTripperWithConfig(streamspdy.RoundTripperConfig{TLS: tlsConfig, Proxier: proxy, PingPeriod: 5 * time.Second})
	if err != nil {
		return nil, "", err
	}
	rt, err := rest.HTTPWrappersForConfig(cfg, upgrader)
	if err != nil {
		return nil, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	for _, p := range protocols {
		req.Header.Add(streamhttp.HeaderProtocolVersion, p)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, "", statusError(resp)
	}
	conn, err := upgrader.NewConnection(resp)
	if err != nil {
		return nil, "", err
	}
	return conn, resp.Header.Get(streamhttp.HeaderProtocolVersion), nil
}

// maxStatus bounds the refusal body read.
const maxStatus = 64 << 10

// statusError is the API server's refusal of an upgrade: its Status when
// the body is one, else the HTTP status with the body's text.
func statusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatus))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		return &apierrors.StatusError{ErrStatus: st}
	}
	st = metav1.Status{Status: metav1.StatusFailure, Code: int32(resp.StatusCode), Reason: metav1.StatusReasonUnknown, Message: strings.TrimSpace(string(body))}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		st.Reason = metav1.StatusReasonUnauthorized
	case http.StatusForbidden:
		st.Reason = metav1.StatusReasonForbidden
	case http.StatusNotFound:
		st.Reason = metav1.StatusReasonNotFound
	}
	if st.Message == "" {
		st.Message = resp.Status
	}
	return &apierrors.StatusError{ErrStatus: st}
}
