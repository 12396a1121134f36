package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/cli"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/kubeapitest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

// The fake cluster: Service shop/pricing (a ClusterIP) selects pods
// pricing-0..2, each an instance of this server at 127.77.0.1..3 on one
// port; pods order-0..2 at 127.77.1.1..3 are the clients' addresses.
const instances = 3

func serverIP(i int) string { return fmt.Sprintf("127.77.0.%d", i+1) }
func clientIP(i int) string { return fmt.Sprintf("127.77.1.%d", i+1) }

// TestDiagnose: pinlab diagnose, through a kubeconfig whose API server
// (kubeapitest over a fake clientset, on loopback) lists the Service, its
// EndpointSlice and the pods, reads this server's channelz in each pod:
// clients that each hold one connection to the same instance are pinned
// (2 of 3 pods idle, Jain's index 1/3, each client named by its pod with
// one connection to pricing-0); round_robin clients over the three are
// balanced, with 3 connections each.
func TestDiagnose(t *testing.T) {
	port := startInstances(t)
	kubeconfig := fakeCluster(t, port)
	var all []string
	for i := range instances {
		all = append(all, fmt.Sprintf("%s:%d", serverIP(i), port))
	}
	t.Run("pinned", func(t *testing.T) {
		cs := callers(t, func(int) []string { return all[:1] }, "pick_first")
		code, r := diagnoseJSON(t, kubeconfig)
		checkVerdict(t, cs, code, r, 4, diagnose.Pinned, "clusterip-connection")
		t.Logf("%s: %s", r.Verdict, r.Why)
		if r.Rates.Counted != instances || r.Rates.Idle != instances-1 || r.Rates.Jain > 0.34 {
			t.Errorf("step 1: %d counted, %d idle, Jain %.2f; want 3, 2 and 1/3 (every call on pricing-0)", r.Rates.Counted, r.Rates.Idle, r.Rates.Jain)
		}
		if len(r.Clients) != instances {
			t.Fatalf("step 2: clients %+v, want the 3 order pods", r.Clients)
		}
		for i, c := range r.Clients {
			if c.Name != fmt.Sprintf("order-%d", i) || c.Kind != "pod" || c.Conns != 1 || !slices.Equal(c.BusyPods, []string{"pricing-0"}) {
				t.Errorf("step 2: client %+v, want order-%d (a pod) with 1 busy connection to pricing-0", c, i)
			}
		}
		if !strings.HasPrefix(r.Evidence.Source, "API server http://127.0.0.1:") || r.Path.Kind != "ClusterIP" || r.Path.Proxy {
			t.Errorf("source %q, path %+v; want the kubeconfig's API server and a ClusterIP without proxy", r.Evidence.Source, r.Path)
		}
	})
	t.Run("balanced", func(t *testing.T) {
		cs := callers(t, func(int) []string { return all }, "round_robin")
		code, r := diagnoseJSON(t, kubeconfig)
		checkVerdict(t, cs, code, r, 0, diagnose.Balanced, "")
		t.Logf("%s: %s", r.Verdict, r.Why)
		if r.Rates.Idle != 0 || r.Rates.Jain < 0.9 {
			t.Errorf("step 1: %d idle, Jain %.2f; want none idle and at least 0.9", r.Rates.Idle, r.Rates.Jain)
		}
		for _, c := range r.Clients {
			if c.Conns != instances || len(c.BusyPods) != instances {
				t.Errorf("step 2: client %+v, want 3 busy connections, one to each pod", c)
			}
		}
	})
}

// startInstances serves one instance at each server IP, all on one port,
// until the test ends, and returns the port.
func startInstances(t *testing.T) int {
	t.Helper()
	var port int
	for attempt := 0; ; attempt++ {
		lis, err := listenAll(port)
		if err == nil {
			for _, l := range lis {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- serve(ctx, l) }()
				t.Cleanup(func() {
					cancel()
					if err := <-done; err != nil {
						t.Error(err)
					}
				})
			}
			return lis[0].Addr().(*net.TCPAddr).Port
		}
		if attempt == 5 {
			t.Fatal(err)
		}
	}
}

// listenAll listens at every server IP on one port the kernel picks for
// the first.
func listenAll(port int) ([]net.Listener, error) {
	var out []net.Listener
	for i := range instances {
		l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", serverIP(i), port))
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		port = l.Addr().(*net.TCPAddr).Port
		out = append(out, l)
	}
	return out, nil
}

// fakeCluster serves the cluster's objects as an API server on loopback
// and returns a kubeconfig file for it.
func fakeCluster(t *testing.T, port int) string {
	t.Helper()
	ready := true
	portName, p := "grpc", int32(port)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "pricing-abcde", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "pricing"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &p}},
	}
	objs := []any{&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.20", Selector: map[string]string{"app": "pricing"},
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 50051, TargetPort: intstr.FromString("grpc")}}},
	}}
	for i := range instances {
		name := fmt.Sprintf("pricing-%d", i)
		objs = append(objs, pod(name, "pricing", serverIP(i), p), pod(fmt.Sprintf("order-%d", i), "order", clientIP(i), 0))
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{serverIP(i)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: name}})
	}
	api := fake.NewClientset()
	ctx := context.Background()
	for _, o := range append(objs, slice) {
		var err error
		switch o := o.(type) {
		case *corev1.Service:
			_, err = api.CoreV1().Services("shop").Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = api.CoreV1().Pods("shop").Create(ctx, o, metav1.CreateOptions{})
		case *discoveryv1.EndpointSlice:
			_, err = api.DiscoveryV1().EndpointSlices("shop").Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	srv := kubeapitest.NewServer(t, api)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q}\nusers:\n- name: u\n  user: {token: not-checked}\ncontexts:\n- name: c\n  context: {cluster: c, user: u, namespace: shop}\ncurrent-context: c\n", srv.URL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pod is a ready, running pod of app at ip, with a containerPort "grpc"
// when port is not 0.
func pod(name, app, ip string, port int32) *corev1.Pod {
	c := corev1.Container{Name: app, Image: "example.com/" + app}
	if port != 0 {
		c.Ports = []corev1.ContainerPort{{Name: "grpc", ContainerPort: port}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": app}, CreationTimestamp: metav1.Now()},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, HostIP: "127.77.2.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// caller counts one client's calls; first is closed at its first
// successful call.
type caller struct {
	ok, failed atomic.Int64
	first      chan struct{}
}

// Bounds of each client's load.
const (
	callEvery = 20 * time.Millisecond // 50 calls/s
	maxCalls  = 3000                  // a minute's worth
)

// callers starts one client per order pod, dialling from its IP the
// addresses addrs(i) with policy, each calling Health/Check every
// callEvery until the test ends or it made maxCalls calls; it returns
// once every client had a successful call.
func callers(t *testing.T, addrs func(i int) []string, policy string) []*caller {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var out []*caller
	for i := range instances {
		r := manual.NewBuilderWithScheme(fmt.Sprintf("example%d", i))
		var state resolver.State
		for _, a := range addrs(i) {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
		}
		r.InitialState(state)
		local := &net.TCPAddr{IP: net.ParseIP(clientIP(i))}
		cc, err := grpc.NewClient(r.Scheme()+":///pricing",
			grpc.WithResolvers(r),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, policy)),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				return (&net.Dialer{LocalAddr: local}).DialContext(ctx, "tcp", a)
			}))
		if err != nil {
			t.Fatal(err)
		}
		c := &caller{first: make(chan struct{})}
		out = append(out, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cc.Close()
			call(ctx, healthpb.NewHealthClient(cc), c)
		}()
	}
	timeout := time.After(30 * time.Second)
	for i, c := range out {
		select {
		case <-c.first:
		case <-timeout:
			t.Fatalf("client %d had no successful call within 30s (%d failed)", i, c.failed.Load())
		}
	}
	return out
}

// call calls hc every callEvery until ctx ends or maxCalls calls.
func call(ctx context.Context, hc healthpb.HealthClient, c *caller) {
	tick := time.NewTicker(callEvery)
	defer tick.Stop()
	for range maxCalls {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			c.failed.Add(1)
		} else if c.ok.Add(1) == 1 {
			close(c.first)
		}
	}
}

// diagnoseJSON runs `pinlab diagnose pricing -n shop --kubeconfig FILE
// --direct -o json` (the fake API server serves no port-forward: the
// instances are dialled at their loopback pod IPs) and returns its exit
// code and result.
func diagnoseJSON(t *testing.T, kubeconfig string) (int, diagnose.Result) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main([]string{"diagnose", "pricing", "-n", "shop", "--kubeconfig", kubeconfig, "--direct", "--window", "2s", "-o", "json"}, &out, &errb)
	var r diagnose.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("diagnose: exit %d, output not JSON (%v):\n%s\nstderr: %s", code, err, out.String(), errb.String())
	}
	return code, r
}

// checkVerdict compares the verdict with the one wanted; when they differ
// on a machine too loaded to serve the calls (over 5% of them failed, or
// a channelz reading timed out) it skips with the figures.
func checkVerdict(t *testing.T, cs []*caller, code int, r diagnose.Result, wantCode int, want diagnose.Verdict, cause string) {
	t.Helper()
	if code == wantCode && r.Verdict == want && r.Cause == cause {
		return
	}
	msg := fmt.Sprintf("diagnose: exit %d, verdict %q, cause %q; want exit %d, %q, %q\nwhy: %s\nproblems: %q", code, r.Verdict, r.Cause, wantCode, want, cause, r.Why, r.Evidence.Problems)
	var ok, failed int64
	for _, c := range cs {
		ok, failed = ok+c.ok.Load(), failed+c.failed.Load()
	}
	timedOut := slices.ContainsFunc(r.Evidence.Problems, func(p string) bool {
		return strings.Contains(p, "timed out") || strings.Contains(p, "DeadlineExceeded")
	})
	if share := float64(failed) / float64(max(1, ok+failed)); share > 0.05 || timedOut {
		t.Skipf("overloaded: %.1f%% of the clients' calls failed, a channelz reading timed out: %v; %s", 100*share, timedOut, msg)
	}
	t.Fatal(msg)
}
