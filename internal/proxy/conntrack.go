package proxy

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Conn is one tracked connection through a VIP: the lab's view of a
// conntrack entry whose original destination is a Service IP.
type Conn struct {
	// Client is the address the client connected from (and the source the
	// pod sees: DNAT without SNAT).
	Client netip.AddrPort
	// VIP is the ClusterIP:port the client connected to.
	VIP netip.AddrPort
	// Service and PortName name the Service port the VIP belongs to.
	Service  types.NamespacedName
	PortName string
	// Endpoint is the podIP:targetPort chosen when the connection opened;
	// Pod is the EndpointSlice targetRef name ("" if none).
	Endpoint netip.AddrPort
	Pod      string
	// Opened is when the connection to the pod was established.
	Opened time.Time
}

// ConnEvent says what happened to a tracked connection in a Config.OnConn
// call.
type ConnEvent int

const (
	// ConnOpened: the pod accepted the connection; the relay starts.
	ConnOpened ConnEvent = iota + 1
	// ConnClosed: both directions are done and the entry left the table.
	ConnClosed
)

func (e ConnEvent) String() string {
	switch e {
	case ConnOpened:
		return "opened"
	case ConnClosed:
		return "closed"
	}
	return "unknown"
}

// relay is one tracked connection: the accepted client socket and the socket
// dialled to the pod.
type relay struct {
	conn        Conn
	client, pod *net.TCPConn
}

// conntrack is the table of open relays. Its lock is held only for a map
// insert, delete or copy.
type conntrack struct {
	mu     sync.Mutex
	closed bool
	relays map[*relay]struct{}
}

// add tracks r; false once closeAll has run, in which case the caller must
// close r itself.
func (t *conntrack) add(r *relay) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.relays == nil {
		t.relays = map[*relay]struct{}{}
	}
	t.relays[r] = struct{}{}
	return true
}

func (t *conntrack) remove(r *relay) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.relays, r)
}

// snapshot returns the open connections, oldest first.
func (t *conntrack) snapshot() []Conn {
	t.mu.Lock()
	conns := make([]Conn, 0, len(t.relays))
	for r := range t.relays {
		conns = append(conns, r.conn)
	}
	t.mu.Unlock()
	slices.SortFunc(conns, func(a, b Conn) int {
		if c := a.Opened.Compare(b.Opened); c != 0 {
			return c
		}
		return a.Client.Compare(b.Client)
	})
	return conns
}

// closeAll refuses further relays and closes both sockets of every open one;
// their goroutines then finish and remove themselves.
func (t *conntrack) closeAll() {
	t.mu.Lock()
	t.closed = true
	open := make([]*relay, 0, len(t.relays))
	for r := range t.relays {
		open = append(open, r)
	}
	t.mu.Unlock()
	for _, r := range open {
		r.client.Close()
		r.pod.Close()
	}
}
