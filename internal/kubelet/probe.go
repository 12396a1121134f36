package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// probeKind is one of the kubelet's three probes.
type probeKind int

const (
	readiness probeKind = iota
	liveness
	startup
)

func (k probeKind) String() string {
	return [...]string{"readiness", "liveness", "startup"}[k]
}

// defaultProbeInterval is how often the lab's default readiness check (for
// containers without a readinessProbe) retries until the server first
// answers.
const defaultProbeInterval = 50 * time.Millisecond

// prober runs one probe of a container. Like the kubelet's gRPC, TCP and
// HTTP probes, every check opens a fresh connection from the node IP.
type prober struct {
	kind   probeKind
	probe  *corev1.Probe // nil: the lab's default readiness, a gRPC health check
	c      *corev1.Container
	podIP  netip.Addr
	port   int // the server's port, for the default check
	nodeIP netip.Addr
}

// timeout is the probe's timeoutSeconds (default 1s).
func (p *prober) timeout() time.Duration {
	if p.probe != nil && p.probe.TimeoutSeconds > 0 {
		return time.Duration(p.probe.TimeoutSeconds) * time.Second
	}
	return time.Second
}

// period is the probe's periodSeconds (default 10s; the lab's default
// readiness check: defaultProbeInterval).
func (p *prober) period() time.Duration {
	switch {
	case p.probe == nil:
		return defaultProbeInterval
	case p.probe.PeriodSeconds > 0:
		return time.Duration(p.probe.PeriodSeconds) * time.Second
	}
	return 10 * time.Second
}

// check runs the probe once, bounded by its timeout, and returns nil on
// success.
func (p *prober) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	switch {
	case p.probe == nil:
		return p.grpcHealth(ctx, p.port, "")
	case p.probe.GRPC != nil:
		svc := ""
		if p.probe.GRPC.Service != nil {
			svc = *p.probe.GRPC.Service
		}
		port, err := workload.ResolvePort(p.c, intstr.FromInt32(p.probe.GRPC.Port))
		if err != nil {
			return err
		}
		return p.grpcHealth(ctx, port, svc)
	case p.probe.TCPSocket != nil:
		port, err := workload.ResolvePort(p.c, p.probe.TCPSocket.Port)
		if err != nil {
			return err
		}
		c, err := p.dialer().DialContext(ctx, p.addr(port))
		if err != nil {
			return err
		}
		return c.Close()
	case p.probe.HTTPGet != nil:
		return p.httpGet(ctx, p.probe.HTTPGet)
	}
	return errors.New("only grpc, tcpSocket and httpGet probes are supported in the lab")
}

func (p *prober) dialer() loopback.Dialer { return loopback.Dialer{Source: p.nodeIP} }

func (p *prober) addr(port int) string {
	return netip.AddrPortFrom(p.podIP, uint16(port)).String()
}

func (p *prober) grpcHealth(ctx context.Context, port int, service string) error {
	d := p.dialer()
	conn, err := grpc.NewClient("passthrough:///"+p.addr(port),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, addr) }),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %v", resp.GetStatus())
	}
	return nil
}

// probeRun turns single check results into a probe's verdict, as the
// kubelet's prober worker (pkg/kubelet/prober/worker.go doProbe): a run of
// equal results counts up and restarts at 1 when the result changes; a
// result becomes the verdict once its run reaches successThreshold
// (successes) or failureThreshold (failures).
type probeRun struct {
	success, failure int32 // thresholds, at least 1
	last             *bool // nil before the first result
	run              int32
}

func newProbeRun(p *corev1.Probe) *probeRun {
	r := &probeRun{success: 1, failure: 1}
	if p != nil {
		r.success, r.failure = max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	}
	return r
}

// observe records one result. set reports that the result is now the
// verdict (the kubelet's resultsManager.Set); it stays set on every further
// equal result.
func (r *probeRun) observe(ok bool) (set bool) {
	if r.last != nil && *r.last == ok {
		r.run++
	} else {
		r.last, r.run = &ok, 1
	}
	if ok {
		return r.run >= r.success
	}
	return r.run >= r.failure
}

// due reports whether a probe of kind k checks at a tick sinceStart after
// its container started, as doProbe gates it: not while fewer than
// initialDelaySeconds whole seconds have passed; readiness and liveness only
// once the container has started (its startup probe succeeded), startup only
// until then.
func due(k probeKind, p *corev1.Probe, sinceStart time.Duration, started bool) bool {
	if p != nil && int32(sinceStart/time.Second) < p.InitialDelaySeconds {
		return false
	}
	return started == (k != startup)
}

// probeUserAgent is the User-Agent of the kubelet's HTTP probes,
// "kube-probe/<major>.<minor>", for the release of the lab's k8s.io/api.
const probeUserAgent = "kube-probe/1.37"

// maxProbeBody is how much of a probe's response body the kubelet reads
// (10 KiB).
const maxProbeBody = 10 << 10

// maxProbeRedirects is how many redirects an HTTP probe follows, as Go's
// http.Client.
const maxProbeRedirects = 10

// httpGet runs an httpGet probe as the kubelet's (pkg/probe/http): GET
// http://<pod IP>:<port><path> with the probe's headers (User-Agent
// kube-probe/<version> and Accept */* unless set; a Host header sets the
// request's host), on a fresh connection (keep-alives off) from the node
// IP. A status from 200 to 399 is success; redirects to the same host are
// followed (at most 10), a redirect elsewhere is not followed and counts as
// success, as with the kubelet's followNonLocalRedirects off. The host and
// scheme fields are not supported (workload.For rejects them).
func (p *prober) httpGet(ctx context.Context, g *corev1.HTTPGetAction) error {
	if g.Host != "" || (g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP) {
		return errors.New("httpGet probes with a host or scheme HTTPS are not supported in the lab")
	}
	port, err := workload.ResolvePort(p.c, g.Port)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeURL(p.addr(port), g.Path), nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", probeUserAgent)
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	} else if req.Header.Get("Accept") == "" {
		req.Header.Del("Accept")
	}
	req.Host = req.Header.Get("Host")
	d := p.dialer()
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return d.DialContext(ctx, addr) },
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: localRedirects}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

// probeURL is the kubelet's formatURL: the probe's path (with any query)
// on http://addr; a path that does not parse is passed along as it is.
func probeURL(addr, path string) string {
	u, err := url.Parse(path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	u.Scheme, u.Host = "http", addr
	return u.String()
}

// localRedirects follows redirects to the probed host only, as the
// kubelet's redirect checker with followNonLocalRedirects off.
func localRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxProbeRedirects {
		return fmt.Errorf("stopped after %d redirects", maxProbeRedirects)
	}
	return nil
}

// probeResult is one check's outcome, sent from a probe goroutine to its
// pod worker.
type probeResult struct {
	c    *container
	kind probeKind
	err  error // nil: success
	set  bool  // the result is now the probe's verdict
	// failRun counts consecutive failures (for the default readiness
	// check's status message).
	failRun int
}
