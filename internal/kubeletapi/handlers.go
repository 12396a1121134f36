package kubeletapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podlog"
)

// routes are the API's handlers, behind filter.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /pods", s.servePods)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.serveLogs)
	for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+p, s.servePortForward)
		mux.HandleFunc("POST "+p, s.servePortForward)
	}
	for _, p := range []string{"/{namespace}/{pod}/{container}", "/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET /exec"+p, s.serveExec)
		mux.HandleFunc("POST /exec"+p, s.serveExec)
		mux.HandleFunc("GET /attach"+p, s.serveAttach)
		mux.HandleFunc("POST /attach"+p, s.serveAttach)
	}
	return mux
}

// attributes are what a request asks of the node, as the kubelet's
// nodeAuthorizerAttributesGetter maps it (with KubeletFineGrainedAuthz,
// GA in v1.36): the HTTP method as the verb, and the subresources of
// nodes/NAME any of which allows it, proxy (everything) last.
func attributes(node string, u user.Info, r *http.Request) []authorizer.AttributesRecord {
	verb := map[string]string{http.MethodPost: "create", http.MethodGet: "get", http.MethodHead: "get",
		http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
	path := r.URL.Path
	var subs []string
	switch {
	case isSubpath(path, "/pods"), isSubpath(path, "/runningpods"):
		subs = append(subs, "pods")
	case isSubpath(path, "/healthz"):
		subs = append(subs, "healthz")
	case isSubpath(path, "/configz"):
		subs = append(subs, "configz")
	}
	switch {
	case isSubpath(path, "/stats"):
		subs = append(subs, "stats")
	case isSubpath(path, "/metrics"):
		subs = append(subs, "metrics")
	case isSubpath(path, "/logs"):
		subs = append(subs, "log")
	case isSubpath(path, "/checkpoint"):
		subs = append(subs, "checkpoint")
	default:
		subs = append(subs, "proxy")
	}
	out := make([]authorizer.AttributesRecord, 0, len(subs))
	for _, sub := range subs {
		out = append(out, authorizer.AttributesRecord{User: u, Verb: verb, APIVersion: "v1", Resource: "nodes",
			Subresource: sub, Name: node, ResourceRequest: true, Path: path})
	}
	return out
}

// isSubpath reports whether path is prefix or below it.
func isSubpath(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// servePods writes the node's pods as a v1 PodList.
func (s *Server) servePods(w http.ResponseWriter, _ *http.Request) {
	list := corev1.PodList{}
	list.Kind, list.APIVersion = "PodList", "v1"
	for _, p := range s.cfg.Node.Pods() {
		list.Items = append(list.Items, *p)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(&list)
}

// logOptions are the query parameters of containerLogs.
type logOptions struct {
	follow, previous, timestamps bool
	tail                         int64 // -1: all
	since                        time.Time
	limit                        int64 // 0: none
}

// parseLogOptions reads q as the API server's pods/log passes it on; the
// error says which parameter is wrong and what was expected.
func parseLogOptions(q map[string][]string, now time.Time) (logOptions, error) {
	o := logOptions{tail: -1}
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	for k, dst := range map[string]*bool{"follow": &o.follow, "previous": &o.previous, "timestamps": &o.timestamps} {
		if v := get(k); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("%s: %q is not true or false", k, v)
			}
			*dst = b
		}
	}
	num := func(k string, least int64) (int64, bool, error) {
		v := get(k)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < least {
			return 0, false, fmt.Errorf("%s: %q is not an integer of at least %d", k, v, least)
		}
		return n, true, nil
	}
	if n, ok, err := num("tailLines", 0); err != nil {
		return o, err
	} else if ok {
		o.tail = n
	}
	if n, ok, err := num("limitBytes", 1); err != nil {
		return o, err
	} else if ok {
		o.limit = n
	}
	secs, haveSecs, err := num("sinceSeconds", 1)
	if err != nil {
		return o, err
	}
	if v := get("sinceTime"); v != "" {
		if haveSecs {
			return o, errors.New("sinceSeconds and sinceTime: at most one may be given")
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, fmt.Errorf("sinceTime: %q is not an RFC 3339 time", v)
		}
		o.since = t
	} else if haveSecs {
		o.since = now.Add(-time.Duration(secs) * time.Second)
	}
	return o, nil
}

// serveLogs writes a container's output as the kubelet's containerLogs
// does: the lines kept, from tailLines before the end and not older than
// since, with timestamps if asked, at most limitBytes; following the log
// until the container ends, the client goes or the server closes.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	opts, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		http.Error(w, "invalid log options: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	p, ok := s.cfg.Node.Pod(ns, name)
	if !ok {
		http.Error(w, fmt.Sprintf("pod %s/%s not found", ns, name), http.StatusNotFound)
		return
	}
	var l *podlog.Log
	switch {
	case hasContainer(p, container):
		l, err = s.cfg.Node.Logs(ns, name, opts.previous)
	case isEphemeral(p, container) && !opts.previous:
		l, err = s.cfg.Node.EphemeralLog(ns, name, container)
	case isEphemeral(p, container):
		err = fmt.Errorf("previous terminated container %q in pod %q not found", container, name)
	default:
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, name), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	writeLog(r.Context(), s.done, &limitWriter{w: w, left: opts.limit}, l, opts)
}

// hasContainer reports whether pod p has a container (or an init
// container) named name.
func hasContainer(p *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// isEphemeral reports whether pod p has an ephemeral container named name.
func isEphemeral(p *corev1.Pod, name string) bool {
	for _, e := range p.Spec.EphemeralContainers {
		if e.Name == name {
			return true
		}
	}
	return false
}

// writeLog writes l's lines to w as opts say, following it when asked
// until it closes, ctx ends or done is closed.
func writeLog(ctx context.Context, done <-chan struct{}, w *limitWriter, l *podlog.Log, opts logOptions) {
	lines, next, grew, closed := l.Read(0)
	if opts.tail >= 0 && int64(len(lines)) > opts.tail {
		lines = lines[len(lines)-int(opts.tail):]
	}
	for {
		for _, line := range lines {
			if !opts.since.IsZero() && line.At.Before(opts.since) {
				continue
			}
			text := line.Text + "\n"
			if opts.timestamps {
				text = line.At.UTC().Format(time.RFC3339Nano) + " " + text
			}
			if _, err := io.WriteString(w, text); err != nil {
				return
			}
		}
		if f, ok := w.w.(http.Flusher); ok {
			f.Flush()
		}
		if !opts.follow || closed {
			return
		}
		select {
		case <-grew:
		case <-ctx.Done():
			return
		case <-done:
			return
		}
		lines, next, grew, closed = l.Read(next)
	}
}

// limitWriter writes at most left bytes to w (no limit when left is 0),
// then fails with errLimit, as the kubelet's log limit cuts the output.
type limitWriter struct {
	w    io.Writer
	left int64
}

var errLimit = errors.New("kubeletapi: limitBytes reached")

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.left == 0 {
		return l.w.Write(b)
	}
	cut := len(b) > int(min(l.left, int64(len(b))))
	if cut {
		b = b[:l.left]
	}
	n, err := l.w.Write(b)
	l.left -= int64(n)
	if err == nil && (cut || l.left == 0) {
		l.left = -1
		err = errLimit
	}
	if l.left < 0 {
		return n, errLimit
	}
	return n, err
}

// servePortForward forwards the ports the client asks for to the pod's
// address, through k8s.io/cri-streaming's portforward (SPDY, or WebSocket
// with or without the SPDY tunnel), as the kubelet's getPortForward. The
// session ends when the client ends it, the pod is gone (deleted, or
// another pod of its name) or the server closes.
func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name, uid := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid")
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	opts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if opts, err = portforward.NewV4Options(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	p, ok := s.cfg.Node.Pod(ns, name)
	if !ok {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	if uid != "" && string(p.UID) != uid {
		http.Error(w, "pod not found", http.StatusNotFound)
		return
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.session(w, p, 0, func(w http.ResponseWriter) {
			portforward.ServePortForward(w, r, forwarder{s: s, namespace: ns}, p.Name, string(p.UID), opts,
				StreamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
		})
	})
	if tunnel {
		h = translator.NewTunnelingHandler(h)
	}
	h.ServeHTTP(w, r)
}

// session runs serve, a streaming session (port-forward, exec, attach) of
// pod p, and ends it by closing the connection serve takes over when the
// server closes, or grace after the pod is gone (deleted, or another pod of
// its name: a session that ends itself meanwhile can say why); Close
// waits for it.
func (s *Server) session(w http.ResponseWriter, p *corev1.Pod, grace time.Duration, serve func(http.ResponseWriter)) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		http.Error(w, "the node is shutting down", http.StatusServiceUnavailable)
		return
	}
	s.sessions.Add(1)
	s.mu.Unlock()
	defer s.sessions.Done()
	rec := &hijackRecorder{ResponseWriter: w, conns: make(chan net.Conn, 1)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.endWith(rec.conns, stop, p.Namespace, p.Name, p.UID, grace)
	}()
	serve(rec)
	close(stop)
	wg.Wait()
}

// hijackRecorder passes on the connection its handler hijacks, so that the
// session can be ended from outside.
type hijackRecorder struct {
	http.ResponseWriter
	conns chan net.Conn // cap 1
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("kubeletapi: the connection cannot be taken over")
	}
	c, rw, err := hj.Hijack()
	if err == nil {
		select {
		case h.conns <- c:
		default:
		}
	}
	return c, rw, err
}

// podCheck is how often a forwarding session looks whether its pod is
// still there.
const podCheck = time.Second

// endWith closes the session's connection (from conns) grace after the
// pod namespace/name with uid is gone, or when the server closes, until
// stop.
func (s *Server) endWith(conns <-chan net.Conn, stop <-chan struct{}, ns, name string, uid types.UID, grace time.Duration) {
	var conn net.Conn
	select {
	case conn = <-conns:
	case <-stop:
		return
	}
	t := time.NewTicker(podCheck)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.done:
			conn.Close()
			return
		case <-t.C:
			if p, ok := s.cfg.Node.Pod(ns, name); !ok || p.UID != uid {
				g := time.NewTimer(grace)
				select {
				case <-g.C:
				case <-stop:
				case <-s.done:
				}
				g.Stop()
				conn.Close()
				return
			}
		}
	}
}

// forwarder connects a port-forward stream to a port of a pod's address.
type forwarder struct {
	s         *Server
	namespace string
}

// dialTimeout bounds the connect to the pod's port.
const dialTimeout = 5 * time.Second

// PortForward copies between stream and port of the pod's address until
// the pod's side ends (the client's end only half-closes it), the stream
// breaks or the server closes. It fails when the pod is gone, has no
// address or nothing listens on port.
func (f forwarder) PortForward(ctx context.Context, name, uid string, port int32, stream io.ReadWriteCloser) error {
	p, ok := f.s.cfg.Node.Pod(f.namespace, name)
	if !ok || string(p.UID) != uid {
		return fmt.Errorf("pod %s/%s not found", f.namespace, name)
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return fmt.Errorf("pod %s/%s has no address yet", f.namespace, name)
	}
	if port <= 0 || port > 65535 {
		return fmt.Errorf("port %d: want 1-65535", port)
	}
	conn, err := loopback.Dialer{Timeout: dialTimeout}.DialContext(ctx, netip.AddrPortFrom(ip, uint16(port)).String())
	if err != nil {
		return err
	}
	// Client to pod: ends when the client half-closes (then the pod's
	// side is half-closed too) or the session's connection ends (every
	// stream is then reset); the session owns it.
	go func() {
		io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	fromPod := make(chan error, 1)
	go func() {
		_, err := io.Copy(stream, conn)
		fromPod <- err
	}()
	closing := false
	select {
	case err = <-fromPod:
	case <-f.s.done:
		closing = true
	}
	conn.Close()
	stream.Close() // the client reads its end
	if closing {
		<-fromPod
		err = nil
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
