package podtest

import (
	"fmt"
	"net/netip"
	"sync"

	"google.golang.org/grpc/codes"
)

// Recorder is a pod.Observer keeping counts of what it was told: requests
// and messages by route and code with the peers that made them, and
// connections by peer IP. The zero value is ready; it is safe for
// concurrent use.
type Recorder struct {
	mu     sync.Mutex
	served map[string]map[codes.Code]int // route -> code -> count
	peers  map[string][]netip.Addr       // route -> peer of each, in order
	opened map[netip.Addr]int            // peer IP -> connections opened
	closed map[netip.Addr]int            // peer IP -> connections closed
}

// Served counts one finished request or message.
func (r *Recorder) Served(peer netip.AddrPort, route string, code codes.Code) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.served == nil {
		r.served, r.peers = map[string]map[codes.Code]int{}, map[string][]netip.Addr{}
	}
	if r.served[route] == nil {
		r.served[route] = map[codes.Code]int{}
	}
	r.served[route][code]++
	r.peers[route] = append(r.peers[route], peer.Addr())
}

// Conn counts a connection opening or closing.
func (r *Recorder) Conn(peer netip.AddrPort, open bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opened == nil {
		r.opened, r.closed = map[netip.Addr]int{}, map[netip.Addr]int{}
	}
	if open {
		r.opened[peer.Addr()]++
	} else {
		r.closed[peer.Addr()]++
	}
}

// Count is how many requests or messages of route ended with code; route
// "" counts those of every route.
func (r *Recorder) Count(route string, code codes.Code) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if route != "" {
		return r.served[route][code]
	}
	n := 0
	for _, byCode := range r.served {
		n += byCode[code]
	}
	return n
}

// Total is how many requests and messages ended, of every route and code.
func (r *Recorder) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, byCode := range r.served {
		for _, c := range byCode {
			n += c
		}
	}
	return n
}

// Peers lists the peer IP of each request or message of route, in the
// order they ended.
func (r *Recorder) Peers(route string) []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]netip.Addr(nil), r.peers[route]...)
}

// Conns is how many connections were reported open and closed.
func (r *Recorder) Conns() (opened, closed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.opened {
		opened += n
	}
	for _, n := range r.closed {
		closed += n
	}
	return opened, closed
}

// ConnsFrom is how many connections from peer IP ip were reported open and
// closed.
func (r *Recorder) ConnsFrom(ip netip.Addr) (opened, closed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opened[ip], r.closed[ip]
}

// String lists the counts by route and code, for failure messages.
func (r *Recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.served)
}
