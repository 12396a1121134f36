//go:build linux

package agent

import (
	"fmt"
	"io"
	"net"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// served is a listener on loopback with clients connected to it, each
// having sent and received known byte counts.
type served struct {
	ln       net.Listener
	port     int
	clients  []net.Conn // the clients' sides
	servers  []net.Conn // the server's sides, in the same order
	up, down []int      // bytes each client sent, and received
}

// serve listens on addr and connects a client from dial's host for each
// count pair (bytes up, bytes down), waiting until both ends have read
// them. It skips the test when the address family is unavailable.
func serve(t *testing.T, network, addr, dial string, counts [][2]int) *served {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("no %s listener on %s here: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &served{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	for _, c := range counts {
		client, err := net.Dial("tcp", net.JoinHostPort(dial, fmt.Sprint(s.port)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		server, err := ln.Accept() // the handshake is done: no goroutine needed
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { server.Close() })
		transfer(t, client, server, c[0])
		transfer(t, server, client, c[1])
		s.clients, s.servers = append(s.clients, client), append(s.servers, server)
		s.up, s.down = append(s.up, c[0]), append(s.down, c[1])
	}
	return s
}

// transfer sends n bytes from one end and reads them at the other (they
// fit in loopback's socket buffers, so the write does not wait).
func transfer(t *testing.T, from, to net.Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	from.SetDeadline(deadline)
	to.SetDeadline(deadline)
	if _, err := from.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(to, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
}

// addr is a net.Addr as Conn prints it.
func addr(a net.Addr) string {
	return unmap(a.(*net.TCPAddr).AddrPort()).String()
}

var cookie = regexp.MustCompile(`^[0-9a-f]{16}$`)

// problem says what is wrong with r for s's connections, or "".
func (s *served) problem(r Reading, wantSource string, exact bool) string {
	bytes := wantSource == sourceSockDiag
	if r.Err != "" || r.Source != wantSource || r.Bytes != bytes {
		return fmt.Sprintf("error %q, source %q, bytes %v; want no error, %q, %v", r.Err, r.Source, r.Bytes, wantSource, bytes)
	}
	byRemote := map[string]Conn{}
	local := addr(s.servers[0].LocalAddr())
	for _, c := range r.Conns {
		for _, cl := range s.clients {
			if c.Local == addr(cl.LocalAddr()) {
				return fmt.Sprintf("a client's own outbound socket listed: %+v", c)
			}
		}
		if c.Local == local {
			byRemote[c.Remote] = c
		}
	}
	if len(byRemote) != len(s.clients) || (exact && len(r.Conns) != len(s.clients)) {
		return fmt.Sprintf("%d conns, %d of them on %s; want %d", len(r.Conns), len(byRemote), local, len(s.clients))
	}
	ids := map[string]bool{}
	for i, cl := range s.clients {
		c, ok := byRemote[addr(cl.LocalAddr())]
		switch {
		case !ok:
			return fmt.Sprintf("no conn from client %s", addr(cl.LocalAddr()))
		case ids[c.ID]:
			return fmt.Sprintf("ID %s twice", c.ID)
		case bytes && !cookie.MatchString(c.ID), !bytes && (!strings.HasPrefix(c.ID, "inode:") || c.ID == "inode:0"):
			return fmt.Sprintf("conn %+v: ID not a %s one", c, wantSource)
		case bytes && c.RX < int64(s.up[i]):
			return fmt.Sprintf("conn %+v: want rx >= %d", c, s.up[i])
		case bytes && c.TX < int64(s.down[i]):
			return fmt.Sprintf("conn %+v: want tx >= %d (acked)", c, s.down[i])
		case !bytes && (c.RX != 0 || c.TX != 0):
			return fmt.Sprintf("conn %+v: bytes from %s", c, wantSource)
		}
		ids[c.ID] = true
	}
	return ""
}

// TestReadLoopback reads real connections of the test's own namespace
// through sock_diag and /proc.
func TestReadLoopback(t *testing.T) {
	listeners := []struct {
		name, network, addr, dial string
	}{
		{name: "IPv4", network: "tcp4", addr: "127.0.0.1:0", dial: "127.0.0.1"},
		{name: "IPv6", network: "tcp6", addr: "[::1]:0", dial: "::1"},
		// A Go server's ":port": IPv4 clients on an IPv6 socket, as ::ffff:a.b.c.d.
		{name: "IPv4 on dual stack", network: "tcp", addr: "[::]:0", dial: "127.0.0.1"},
	}
	readers := []struct {
		name     string
		proc     bool
		allPorts bool
	}{
		{name: "sock_diag, its port"},
		{name: "sock_diag, listening ports", allPorts: true},
		{name: "proc, its port", proc: true},
		{name: "proc, listening ports", proc: true, allPorts: true},
	}
	for _, l := range listeners {
		t.Run(l.name, func(t *testing.T) {
			s := serve(t, l.network, l.addr, l.dial, [][2]int{{1000, 2000}, {3000, 4000}})
			for _, rd := range readers {
				t.Run(rd.name, func(t *testing.T) {
					o := Options{Proc: rd.proc}
					if !rd.allPorts {
						o.Ports = []int{s.port}
					}
					source := sourceSockDiag
					if rd.proc {
						source = sourceProc
					}
					// Wait for the clients' acks (delayed ACK) to count as tx;
					// any other problem fails at once.
					tick := time.NewTicker(10 * time.Millisecond)
					defer tick.Stop()
					var r Reading
					var msg string
					for deadline := time.Now().Add(5 * time.Second); ; <-tick.C {
						r, _ = Read(o)
						msg = s.problem(r, source, !rd.allPorts)
						if !strings.HasSuffix(msg, "(acked)") || time.Now().After(deadline) {
							break
						}
					}
					if msg != "" {
						t.Errorf("Read(%+v): %s\nreading: %+v", o, msg, r)
					}
				})
			}
		})
	}
}

// TestReadInNamespace reads, through Do, the connections of another
// network namespace (as pinlab could read a pod's from outside it), and
// not the caller's. Making the namespace needs CAP_SYS_ADMIN; the test
// skips without.
func TestReadInNamespace(t *testing.T) {
	// The thread is unlocked only once back in the test's namespace; a
	// thread left locked ends with its goroutine.
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orig.Close() })
	pod, err := netns.New() // and enters it
	if err != nil {
		runtime.UnlockOSThread()
		t.Skipf("no new network namespace here: %v", err)
	}
	t.Cleanup(func() { pod.Close() })
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("lo up: %v", err)
	}
	s := serve(t, "tcp4", "127.0.0.1:0", "127.0.0.1", [][2]int{{1000, 2000}, {3000, 4000}})
	if err := netns.Set(orig); err != nil {
		t.Fatalf("back to the test's namespace: %v", err)
	}
	runtime.UnlockOSThread()

	inPod := func(f func() error) error {
		runtime.LockOSThread()
		if err := netns.Set(pod); err != nil {
			runtime.UnlockOSThread()
			return err
		}
		err := f()
		if err := netns.Set(orig); err != nil {
			return err
		}
		runtime.UnlockOSThread()
		return err
	}
	tests := []struct {
		name   string
		o      Options
		source string
	}{
		{name: "sock_diag", o: Options{Do: inPod}, source: sourceSockDiag},
		{name: "sock_diag, its port", o: Options{Do: inPod, Ports: []int{s.port}}, source: sourceSockDiag},
		{name: "proc", o: Options{Do: inPod, Proc: true}, source: sourceProc},
		{name: "sock_diag, not in the pod", o: Options{Ports: []int{s.port}}, source: sourceSockDiag},
		{name: "proc, not in the pod", o: Options{Ports: []int{s.port}, Proc: true}, source: sourceProc},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			var r Reading
			var msg string
			for deadline := time.Now().Add(5 * time.Second); ; <-tick.C {
				r, _ = Read(tc.o)
				if tc.o.Do == nil {
					msg = s.absent(r, tc.source)
					break
				}
				msg = s.problem(r, tc.source, true)
				if !strings.HasSuffix(msg, "(acked)") || time.Now().After(deadline) {
					break
				}
			}
			if msg != "" {
				t.Errorf("Read(%+v): %s\nreading: %+v", tc.o, msg, r)
			}
		})
	}
}

// absent says what is wrong with r, a reading of another namespace than
// s's, or "".
func (s *served) absent(r Reading, wantSource string) string {
	if r.Err != "" || r.Source != wantSource {
		return fmt.Sprintf("error %q, source %q; want no error, %q", r.Err, r.Source, wantSource)
	}
	local := addr(s.servers[0].LocalAddr())
	for _, c := range r.Conns {
		if c.Local == local {
			return fmt.Sprintf("conn %+v from the other namespace", c)
		}
	}
	return ""
}
