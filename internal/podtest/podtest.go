// Package podtest helps tests that run the lab's pod servers and call
// them: it starts a pod's gRPC server or its HTTP/1.1 and WebSocket server
// on loopback, records what a pod reports to its pod.Observer, dials a pod
// over gRPC from a source address of the test's choosing, classifies a TCP
// connect, and compares call throughput on two paths in benchmarks. Tests
// of the servers (internal/pod, as package pod_test), of the kubelet that
// runs them, of the proxies in front of them (internal/l7proxy) and of the
// clients that load them (internal/load, internal/lab) share it.
package podtest

import (
	"context"
	"net/netip"
	"testing"

	"github.com/pinlab/pinlab/internal/pod"
)

// Start starts a pod's gRPC server with cfg, whose Addr must be an IP of
// 127.0.0.0/8 and a port (0 picks a free one), and kills it when the test
// ends.
func Start(t testing.TB, cfg pod.Config) *pod.Server {
	t.Helper()
	s := pod.New(cfg)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartWeb starts a pod's web server named "pod-<ip>" in namespace "shop"
// on ip:port (port 0 picks a free one) and kills it when the test ends.
// cfg's Name, Namespace and Addr are overwritten.
func StartWeb(t testing.TB, ip string, port uint16, cfg pod.WebConfig) *pod.WebServer {
	t.Helper()
	cfg.Name, cfg.Namespace = "pod-"+ip, "shop"
	cfg.Addr = netip.AddrPortFrom(netip.MustParseAddr(ip), port)
	s := pod.NewWebServer(cfg)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}
