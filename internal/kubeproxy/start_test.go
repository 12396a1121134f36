package kubeproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/netns"
)

// requireEnv, set to 1, makes the tests fail instead of skipping when the
// binaries or the kernel tools are missing.
const requireEnv = "PINLAB_REQUIRE_CONTROL_PLANE"

// need skips t (or fails it under requireEnv) without the binaries or
// mode's tools, and returns the bin directory.
func need(t *testing.T, mode Mode) string {
	t.Helper()
	bin, err := controlplane.BinDir()
	if err == nil {
		err = Available(mode)
	}
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return bin
}

const nodeName = "kp-node"

// backends are the pod addresses the test's servers listen on.
var backends = []netip.AddrPort{netip.MustParseAddrPort("10.244.0.2:8080"), netip.MustParseAddrPort("10.244.0.3:8080")}

// TestServesClusterIP starts a control plane, a Node, a selector-less
// Service with an EndpointSlice of two servers, and kube-proxy in each
// mode: connections to the ClusterIP from a pod address reach both
// servers, and Rules reads the VIP with both endpoints back from the
// kernel.
func TestServesClusterIP(t *testing.T) {
	bin := need(t, ModeNFTables)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Config{BinDir: bin, AdvertiseAddress: netip.MustParseAddr("10.244.255.254")})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	vip := createService(t, ctx, client)
	hits := serve(t)
	for _, mode := range []Mode{ModeNFTables, ModeIPTables} {
		t.Run(string(mode), func(t *testing.T) {
			need(t, mode)
			began := time.Now()
			kp, err := Start(ctx, Config{BinDir: bin, Kubeconfig: cp.KubeProxyKubeconfig(), Mode: mode, NodeName: nodeName, ClusterCIDR: netns.PodPrefix})
			if err != nil {
				t.Fatal(err)
			}
			defer kp.Close()
			t.Logf("%s: started and synced in %v", mode, time.Since(began).Round(time.Millisecond))
			if os.Getenv("KUBEPROXY_DUMP") != "" {
				defer dump(t, mode)
			}
			waitRule(t, ctx, kp, vip, 2)
			read := time.Now()
			if _, err := kp.Rules(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: one Rules read took %v", mode, time.Since(read).Round(100*time.Microsecond))
			for _, b := range backends {
				hits[b].Store(0)
			}
			const conns = 60
			for i := range conns {
				dialOnce(t, ctx, vip, i)
			}
			got := map[netip.AddrPort]int64{}
			for _, b := range backends {
				got[b] = hits[b].Load()
			}
			t.Logf("%s: %d connections to %v from 10.244.0.9: %v", mode, conns, vip, got)
			if got[backends[0]]+got[backends[1]] != conns || got[backends[0]] == 0 || got[backends[1]] == 0 {
				t.Errorf("%d connections to %v from a pod address reached %v; want all, on both servers", conns, vip, got)
			}
		})
	}
}

// waitRule polls Rules until vip has n endpoints.
func waitRule(t *testing.T, ctx context.Context, kp *KubeProxy, vip netip.AddrPort, n int) []Rule {
	t.Helper()
	var last []Rule
	for range 300 {
		rules, err := kp.Rules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = rules
		for _, r := range rules {
			if r.VIP == vip && len(r.Endpoints) == n {
				return rules
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("kube-proxy never programmed %v with %d endpoints; rules: %+v", vip, n, last)
	return nil
}

// dump logs the kernel's rules, to capture testdata.
func dump(t *testing.T, mode Mode) {
	cmd := []string{"nft", "list", "table", "ip", "kube-proxy"}
	if mode == ModeIPTables {
		cmd = []string{"iptables-save", "-t", "nat"}
	}
	out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
	t.Logf("%s (%v):\n%s", strings.Join(cmd, " "), err, out)
}

// createService creates the Node, a Service and its EndpointSlice and
// returns the ClusterIP:port.
func createService(t *testing.T, ctx context.Context, c kubernetes.Interface) netip.AddrPort {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Status: corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.255.254"}},
		Capacity:  corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")},
	}}
	if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	svc, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name, port, ready := "tcp", int32(8080), true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	for _, b := range backends {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{b.Addr().String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: ptr(nodeName)})
	}
	if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
}

func ptr[T any](v T) *T { return &v }

// atomicCount counts a server's accepted connections.
type atomicCount = atomic.Int64

// serve listens on every backend and counts accepted connections.
func serve(t *testing.T) map[netip.AddrPort]*atomicCount {
	t.Helper()
	hits := map[netip.AddrPort]*atomicCount{}
	for _, b := range backends {
		ln, err := loopback.Listen(context.Background(), b.String())
		if err != nil {
			t.Fatal(err)
		}
		c := &atomicCount{}
		hits[b] = c
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				c.Add(1)
				conn.Close()
			}
		}()
		t.Cleanup(func() { ln.Close(); <-done })
	}
	return hits
}

// dialOnce connects to vip from pod address 10.244.0.9 and waits for the
// server to close.
func dialOnce(t *testing.T, ctx context.Context, vip netip.AddrPort, i int) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(10, 244, 0, 9)}}
	c, err := d.DialContext(ctx, "tcp", vip.String())
	if err != nil {
		t.Fatalf("connection %d to %v from 10.244.0.9: %v", i, vip, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection %d to %v: the server did not close it: %v", i, vip, err)
	}
}

// TestStartFailureSaysWhy: kube-proxy that cannot reach an API server
// exits, and Start's error names its command line (the healthz and
// metrics ports among the flags) and quotes its log.
func TestStartFailureSaysWhy(t *testing.T) {
	bin := need(t, ModeNFTables)
	dir := t.TempDir()
	kubeconfig := dir + "/missing.kubeconfig"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kp, err := Start(ctx, Config{BinDir: bin, Kubeconfig: kubeconfig, NodeName: nodeName, ClusterCIDR: netns.PodPrefix, Log: dir + "/kube-proxy.log", ReadyTimeout: 20 * time.Second})
	if err == nil {
		kp.Close()
		t.Fatal("Start with a missing kubeconfig succeeded")
	}
	for _, want := range []string{"kubeproxy: kube-proxy ", "--kubeconfig=" + kubeconfig, "--healthz-bind-address=127.0.0.1:", "--metrics-bind-address=127.0.0.1:", "log " + dir + "/kube-proxy.log, last lines:", `"Error running ProxyServer"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestConfigChecked(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "empty", cfg: Config{}, want: "Config needs BinDir, Kubeconfig, NodeName and ClusterCIDR"},
		{name: "ipvs", cfg: Config{BinDir: "/x", Kubeconfig: "/k", NodeName: "n", ClusterCIDR: netns.PodPrefix, Mode: "ipvs"}, want: `mode "ipvs": expected nftables or iptables`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Start(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
