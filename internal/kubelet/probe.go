package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// prober runs one container's readiness check. Like the kubelet's gRPC and
// TCP probes, every check opens a fresh connection from the node IP.
type prober struct {
	probe  *corev1.Probe // nil: the lab default, a gRPC health check
	pod    *corev1.Pod
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

// check runs the probe once and returns nil on success.
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
		port, err := p.resolvePort(p.probe.TCPSocket.Port)
		if err != nil {
			return err
		}
		c, err := p.dialer().DialContext(ctx, p.addr(port))
		if err != nil {
			return err
		}
		return c.Close()
	}
	return fmt.Errorf("readiness probe: only grpc and tcpSocket probes are supported in the lab")
}

func (p *prober) dialer() loopback.Dialer { return loopback.Dialer{Source: p.nodeIP} }

func (p *prober) addr(port int) string {
	return netip.AddrPortFrom(p.podIP, uint16(port)).String()
}

func (p *prober) resolvePort(port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return int(port.IntVal), nil
	}
	for _, c := range p.pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == port.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("readiness probe: no container port named %q", port.StrVal)
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
