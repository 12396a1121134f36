package load

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
)

// forwarder stands in for a ClusterIP VIP as kube-proxy's IPVS "rr" mode
// does: each accepted connection goes to the next backend in turn (a
// backend refusing the connect is skipped), and bytes are relayed both ways
// until either side closes.
type forwarder struct {
	ln       net.Listener
	backends []netip.AddrPort
	next     atomic.Uint64
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

func startForwarder(t *testing.T, vip string, backends ...netip.AddrPort) *forwarder {
	t.Helper()
	ln, err := loopback.Listen(context.Background(), vip+":0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *forwarder) URL() string { return "http://" + f.ln.Addr().String() }

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
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

func (f *forwarder) relay(in net.Conn) {
	defer f.wg.Done()
	defer f.untrack(in)
	defer in.Close()
	var out net.Conn
	for range f.backends {
		b := f.backends[(f.next.Add(1)-1)%uint64(len(f.backends))]
		var err error
		if out, err = (loopback.Dialer{Timeout: time.Second}).DialContext(context.Background(), b.String()); err == nil {
			break
		}
	}
	if out == nil {
		return
	}
	if !f.track(out) {
		out.Close()
		return
	}
	defer f.untrack(out)
	defer out.Close()
	var copies sync.WaitGroup
	copies.Add(1)
	go func() {
		defer copies.Done()
		io.Copy(out, in)
		out.Close()
	}()
	io.Copy(in, out)
	in.Close()
	copies.Wait()
}

func (f *forwarder) close() {
	f.mu.Lock()
	f.done = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
}
