// Package podtest helps tests that run the lab's pod servers: it starts a
// pod's HTTP/1.1 and WebSocket server on loopback, records what a pod
// reports to its pod.Observer. Tests of
// the server (internal/pod) and of the clients that load it
// (internal/load) share it.
package podtest

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"github.com/pinlab/pinlab/internal/pod"
	"google.golang.org/grpc/codes"
)

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

// Recorder is a pod.Observer keeping counts of what it was told. The zero
// value is ready; it is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	served map[string]map[codes.Code]int // route -> code -> count
	opened int
	closed int
}

// Served counts one finished request or message.
func (r *Recorder) Served(_ netip.AddrPort, route string, code codes.Code) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.served == nil {
		r.served = map[string]map[codes.Code]int{}
	}
	if r.served[route] == nil {
		r.served[route] = map[codes.Code]int{}
	}
	r.served[route][code]++
}

// Conn counts a connection opening or closing.
func (r *Recorder) Conn(_ netip.AddrPort, open bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if open {
		r.opened++
	} else {
		r.closed++
	}
}

// Count is how many requests or messages of route ended with code.
func (r *Recorder) Count(route string, code codes.Code) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.served[route][code]
}

// Conns is how many connections were reported open and closed.
func (r *Recorder) Conns() (opened, closed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opened, r.closed
}
