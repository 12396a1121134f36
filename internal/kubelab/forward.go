package kubelab

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/proxy"
)

// forwarder copies connections accepted on a host listener to the API
// server inside the namespace, byte for byte (TLS passes through: kubectl
// checks the API server's own certificate). It owns one goroutine per
// connection direction and the accept loop; close stops them all.
type forwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// maxForwarded bounds the connections the forwarder holds at once.
const maxForwarded = 256

func newForwarder(ln net.Listener, target string) *forwarder {
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.accept)
	return f
}

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: back off
			continue
		}
		if !f.track(c) {
			c.Close()
			continue
		}
		f.wg.Go(func() { f.serve(c) })
	}
}

// track records c; false when closed or at the cap.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.conns) >= maxForwarded {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

func (f *forwarder) serve(c net.Conn) {
	defer f.untrack(c)
	up, err := loopback.Dialer{Timeout: 5 * time.Second}.DialContext(context.Background(), f.target)
	if err != nil {
		c.Close()
		return
	}
	if !f.track(up) {
		up.Close()
		c.Close()
		return
	}
	defer f.untrack(up)
	proxy.Relay(c.(*net.TCPConn), up.(*net.TCPConn))
}

// close stops accepting, closes every connection and waits for the
// goroutines.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
}
