package proxy

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	discovery "k8s.io/api/discovery/v1"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
)

// TestLateSYNAnswerIsRelayed: the relay's connect to a pod lasts as the
// kernel keeps a DNATed client's SYN going. A pod whose accept queue is
// full drops the SYN and its retransmission after 1 s; once it accepts
// again, the next retransmission (about 3 s in) connects, and the client's
// connection carries its calls instead of being reset.
func TestLateSYNAnswerIsRelayed(t *testing.T) {
	l := newLab(t, Config{})
	const podIP, vip = "127.202.9.1", "127.201.77.12:18082"
	ln, err := loopback.Listen(context.Background(), podIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := addrPort(ln.Addr())
	ln.Close()
	overflows := listenOverflows(t)
	release := dropSYNs(t, addr)
	pod := &backend{name: "pod-1", addr: addr}
	l.service("pricing", "127.201.77.12", labtest.ServicePort("grpc", 18082))
	l.slice("pricing-a", "pricing", []discovery.EndpointPort{labtest.SlicePort("grpc", addr.Port())}, endpoint(pod, labtest.Ready))
	l.waitListening(vip)
	began := time.Now()
	c := mustDial(t, vip)
	// The relay's SYN and its first retransmission, both dropped; a relay
	// that gave up on the first sends no retransmission.
	if labtest.Poll(labtest.Context(t, 10*time.Second), 20*time.Millisecond, func() bool { return listenOverflows(t) >= overflows+2 }) != nil {
		_, err := c.ask("hello")
		t.Fatalf("the pod's full accept queue dropped %d SYNs in 10 s, want the relay's SYN and its retransmission; the client's call: %v",
			listenOverflows(t)-overflows, err)
	}
	release()
	if pod.ln, err = loopback.Listen(context.Background(), addr.String()); err != nil {
		t.Fatal(err)
	}
	pod.conns = map[net.Conn]bool{}
	pod.wg.Go(pod.serve)
	t.Cleanup(pod.stop)
	if name, err := c.ask("hello"); err != nil || name != pod.name {
		t.Fatalf("a call through the relay to a pod that accepted again after %v: %q, %v; want %s's answer", time.Since(began).Round(time.Millisecond), name, err, pod.name)
	}
}

// listenOverflows is this network namespace's count of SYNs dropped
// because a listener's accept queue was full (TcpExt ListenOverflows).
func listenOverflows(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		for j, n := range names {
			if n == "ListenOverflows" {
				v, err := strconv.Atoi(values[j])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatal("no TcpExt ListenOverflows in /proc/net/netstat")
	return 0
}

// dropSYNs listens on addr with an accept queue of one and fills it, so
// that the kernel drops every SYN to addr until release (idempotent, also
// run at cleanup) closes both.
func dropSYNs(t *testing.T, addr netip.AddrPort) (release func()) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	var filler net.Conn
	release = func() {
		if !closed {
			closed = true
			if filler != nil {
				filler.Close()
			}
			unix.Close(fd)
		}
	}
	t.Cleanup(release)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	if filler, err = (loopback.Dialer{Timeout: time.Second}).DialContext(context.Background(), addr.String()); err != nil {
		t.Fatalf("filling the accept queue of %v: %v", addr, err)
	}
	return release
}
