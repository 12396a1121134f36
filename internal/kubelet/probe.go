package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	corev1 "k8s.io/api/core/v1"

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

// prober runs one probe of a container. Like the kubelet's gRPC and TCP
// probes, every check opens a fresh connection from the node IP.
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
		return p.grpcHealth(ctx, int(p.probe.GRPC.Port), svc)
	case p.probe.TCPSocket != nil:
		port, err := resolvePort(p.c, p.probe.TCPSocket.Port)
		if err != nil {
			return err
		}
		c, err := p.dialer().DialContext(ctx, p.addr(port))
		if err != nil {
			return err
		}
		return c.Close()
	}
	return errors.New("only grpc and tcpSocket probes are supported in the lab")
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
