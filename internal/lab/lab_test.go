package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/load/loadtest"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pricing returns the objects of the lab's standard workload: Deployment
// pricing with n replicas, ClusterIP Service pricing, headless
// pricing-headless.
func pricing(n int32, args ...string) []runtime.Object {
	lbl := map[string]string{"app": "pricing"}
	svc := func(name string, headless bool) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
			Spec: corev1.ServiceSpec{Selector: lbl, Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")}}}}
		if headless {
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}
		return s
	}
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		svc("pricing", false), svc("pricing-headless", true),
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pricing", Image: "pinlab", Args: append([]string{"pod", "pricing"}, args...),
						Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}}}}}},
			},
		},
	}
}

// startLab starts a lab with objs applied and all Deployments ready.
func startLab(t testing.TB, cfg Config, objs []runtime.Object) *Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := l.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

func runClient(t *testing.T, l *Lab, target, policy string, d time.Duration) *loadtest.Tally {
	t.Helper()
	ip, err := l.Cluster.PodIPs().Allocate()
	if err != nil {
		t.Fatal(err)
	}
	var obs loadtest.Tally
	c, err := load.New(load.Config{Name: "order-0", Source: ip, Target: fmt.Sprintf("dns://%s/%s", l.DNSAddr(), target), Policy: policy, Rate: 200, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	labtest.RunFor(c.Run, d)
	return &obs
}

func TestLabEndToEnd(t *testing.T) {
	l := startLab(t, Config{}, pricing(3))
	tests := []struct {
		name     string
		target   string
		policy   string
		wantPods int
	}{
		{name: "ClusterIP pins one channel to one pod", target: "pricing.shop.svc.cluster.local:8471", policy: "pick_first", wantPods: 1},
		{name: "headless round_robin uses every pod", target: "pricing-headless.shop.svc.cluster.local:8471", policy: "round_robin", wantPods: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runClient(t, l, tt.target, tt.policy, 1500*time.Millisecond)
			if got.Codes["OK"] < 100 || len(got.Codes) != 1 {
				t.Fatalf("codes %v: want only OK and at least 100 calls", got.Codes)
			}
			if len(got.Pods) != tt.wantPods {
				t.Errorf("calls by pod %v: want %d pods", got.Pods, tt.wantPods)
			}
		})
	}
}

func TestRangesAreClaimed(t *testing.T) {
	a := startLab(t, Config{}, nil)
	taken := int(a.Cluster.Config().PodCIDR.Addr().As4()[1]) - 243
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if l, err := Start(ctx, Config{Range: taken}); err == nil {
		l.Close()
		t.Fatalf("a second lab started on range %d, which lab a holds", taken)
	}
	b := startLab(t, Config{}, nil)
	if got := int(b.Cluster.Config().PodCIDR.Addr().As4()[1]) - 243; got == taken {
		t.Fatalf("two labs share range %d", got)
	}
	if _, err := Start(ctx, Config{Range: Ranges + 1}); err == nil {
		t.Fatal("range beyond Ranges accepted")
	}
}

// TestDNSServicePortFollowsServer: the kube-dns Service, and so its SRV
// records, name the port the DNS server really listens on, 53 or another.
func TestDNSServicePortFollowsServer(t *testing.T) {
	tests := []struct {
		name string
		port int // Config.DNSPort
	}{
		{name: "default port (53, or a fallback without root)", port: 0},
		{name: "explicit port", port: freeUDPPort(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := startLab(t, Config{DNSPort: tt.port}, nil)
			ap := netip.MustParseAddrPort(l.DNSAddr())
			svc, err := l.Cluster.Client().CoreV1().Services("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range svc.Spec.Ports {
				if p.Port != int32(ap.Port()) || p.TargetPort.IntValue() != int(ap.Port()) {
					t.Errorf("kube-dns port %s = %d -> %s; the DNS serves on %d", p.Name, p.Port, p.TargetPort.String(), ap.Port())
				}
			}
			m := new(dns.Msg)
			m.SetQuestion("_dns._udp.kube-dns.kube-system.svc.cluster.local.", dns.TypeSRV)
			r, _, err := new(dns.Client).Exchange(m, l.DNSAddr())
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Answer) != 1 || r.Answer[0].(*dns.SRV).Port != ap.Port() {
				t.Errorf("SRV _dns._udp.kube-dns = %v, want port %d", r.Answer, ap.Port())
			}
		})
	}
}

// freeUDPPort returns a port that was free for UDP and TCP on 127.0.0.1
// a moment ago; the lab binds it on its own DNS IP, where it is free too
// unless another program took it (the lab then falls back, which the test
// also accepts).
func freeUDPPort(t *testing.T) int {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().(*net.UDPAddr).Port
}
