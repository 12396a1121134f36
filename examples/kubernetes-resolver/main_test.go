package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	kuberesolver "github.com/pinlab/pinlab/resolver/kubernetes"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRun runs the example against two health servers on loopback, each
// the one endpoint of an EndpointSlice of Service shop/pricing in a fake
// clientset (port "grpc" mapped to the server's port): round_robin calls
// both, and every call is printed with the address that served it.
func TestRun(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanups
	api := fake.NewClientset()
	var want []string
	for _, name := range []string{"pricing-a", "pricing-b"} {
		addr := serve(t)
		want = append(want, "served by "+addr.String())
		port, portName, ready := int32(addr.Port), "grpc", true
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "pricing"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}
		if _, err := api.DiscoveryV1().EndpointSlices("shop").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	c := config{target: "kubernetes:///pricing.shop:grpc", calls: 6, interval: 10 * time.Millisecond}
	if err := run(ctx, &out, c, kuberesolver.WithClient(api)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != c.calls {
		t.Errorf("%d lines, want %d:\n%s", len(lines), c.calls, out.String())
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("no call %s:\n%s", w, out.String())
		}
	}
	for i, l := range lines {
		if p := fmt.Sprintf("call %d: served by ", i+1); !strings.HasPrefix(l, p) {
			t.Errorf("line %q, want it to start %q", l, p)
		}
	}
}

// serve starts a gRPC health server on 127.0.0.1:0; the test's cleanup
// stops it.
func serve(t *testing.T) *net.TCPAddr {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().(*net.TCPAddr)
}
