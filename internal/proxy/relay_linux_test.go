package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
)

// blackholedPod serves Service pricing at vip with one endpoint whose SYNs
// the kernel drops (pod.NewBlackhole: a full accept queue) until the
// returned Blackhole is closed.
func blackholedPod(t *testing.T, l *lab, ip, vip string) (netip.AddrPort, *pod.Blackhole) {
	t.Helper()
	ln, err := loopback.Listen(context.Background(), ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := addrPort(ln.Addr())
	ln.Close()
	bh, err := pod.NewBlackhole(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bh.Close() })
	v := netip.MustParseAddrPort(vip)
	l.service("pricing", v.Addr().String(), labtest.ServicePort("grpc", int32(v.Port())))
	l.slice("pricing-a", "pricing", []discovery.EndpointPort{labtest.SlicePort("grpc", addr.Port())}, endpoint(&backend{name: "pod-1", addr: addr}, labtest.Ready))
	l.waitListening(vip)
	return addr, bh
}

// TestLateSYNAnswerIsRelayed: the relay's connect to a pod lasts as the
// kernel keeps a DNATed client's SYN going. A pod that drops the SYN and
// its retransmission after 1 s, then accepts again, is connected on the
// next retransmission (about 3 s in), and the client's connection carries
// its calls instead of being reset.
func TestLateSYNAnswerIsRelayed(t *testing.T) {
	l := newLab(t, Config{})
	const vip = "127.201.77.12:18082"
	addr, bh := blackholedPod(t, l, "127.202.9.1", vip)
	began := time.Now()
	c := mustDial(t, vip)
	if labtest.Poll(labtest.Context(t, 10*time.Second), 20*time.Millisecond, func() bool { return synSent(t, addr) >= 1 }) != nil {
		_, err := c.ask("hello")
		t.Fatalf("no connect to %v retransmitted its SYN within 10 s (a relay that gave up sends none); the client's call: %v", addr, err)
	}
	bh.Close()
	p := &backend{name: "pod-1", addr: addr, conns: map[net.Conn]bool{}}
	var err error
	if p.ln, err = loopback.Listen(context.Background(), addr.String()); err != nil {
		t.Fatal(err)
	}
	p.wg.Go(p.serve)
	t.Cleanup(p.stop)
	if name, err := c.ask("hello"); err != nil || name != p.name {
		t.Fatalf("a call through the relay to a pod that accepted again after %v: %q, %v; want %s's answer", time.Since(began).Round(time.Millisecond), name, err, p.name)
	}
}

// TestDialEndsWithItsClient: a client that closes while the relay still
// dials its pod (grpc-go at its connect deadline) ends that dial, as its
// close ends its own SYNs under DNAT; the pod never gets a connection the
// client gave up.
func TestDialEndsWithItsClient(t *testing.T) {
	l := newLab(t, Config{})
	const vip = "127.201.77.13:18083"
	addr, _ := blackholedPod(t, l, "127.202.9.2", vip)
	c := mustDial(t, vip)
	labtest.WaitFor(t, 10*time.Second, "the relay's connect to the blackholed pod", func() bool { return synSent(t, addr) >= 0 })
	c.Close()
	if labtest.Poll(labtest.Context(t, 5*time.Second), 20*time.Millisecond, func() bool { return synSent(t, addr) < 0 }) != nil {
		t.Fatalf("the relay's connect to %v still pending 5 s after its client closed", addr)
	}
}

// synSent is the retransmission count of a connect to addr still waiting
// for its SYN-ACK (state SYN_SENT in /proc/net/tcp), or -1 if there is none.
func synSent(t *testing.T, addr netip.AddrPort) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	ip := addr.Addr().As4()
	want := fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip[:]), addr.Port())
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt ...
		f := strings.Fields(line)
		if len(f) > 6 && f[2] == want && f[3] == "02" {
			n, err := strconv.ParseInt(f[6], 16, 32)
			if err != nil {
				t.Fatalf("/proc/net/tcp retrnsmt %q: %v", f[6], err)
			}
			return int(n)
		}
	}
	return -1
}
