package proxy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
)

// BenchmarkRelay compares request/response round trips per second on one
// connection straight to the pod and on one through the VIP, in the same
// run, so the ratio is the relay's cost.
func BenchmarkRelay(b *testing.B) {
	l := newLab(b, Config{})
	bs := startBackends(b, "127.202.10.1")
	const vip = "127.201.77.13:18101"
	l.service("pricing", "127.201.77.13", labtest.ServicePort("grpc", 18101))
	l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
	l.waitListening(vip)

	direct := mustDial(b, bs[0].addr.String())
	via := mustDial(b, vip)
	msg := strings.Repeat("x", 63)
	rate := func(c *client) float64 {
		c.SetDeadline(time.Time{})
		start := time.Now()
		for i := 0; i < b.N; i++ {
			c.mustAsk(b, msg)
		}
		return float64(b.N) / time.Since(start).Seconds()
	}
	b.ResetTimer()
	d := rate(direct)
	v := rate(via)
	b.ReportMetric(d, "direct-rt/s")
	b.ReportMetric(v, "vip-rt/s")
	b.ReportMetric(v/d, "vip/direct")
}

// BenchmarkChoose measures the per-connection endpoint decision alone (no
// sockets) for each mode over 10 endpoints, without affinity and with
// ClientIP affinity for 1000 clients taking turns (all hits after the first
// round; ipvs also takes and releases its template hold).
func BenchmarkChoose(b *testing.B) {
	eps := lbEndpoints(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	clients := make([]netip.Addr, 1000)
	for i := range clients {
		clients[i] = netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
	}
	vip := netip.MustParseAddrPort("127.96.0.1:80")
	for _, mode := range []Mode{ModeIPTables, ModeNFTables, ModeIPVS} {
		for _, affinity := range []time.Duration{0, time.Hour} {
			b.Run(fmt.Sprintf("%s/affinity=%t", mode, affinity > 0), func(b *testing.B) {
				p := &Proxier{mode: mode, now: time.Now}
				sp := &servicePort{vip: vip, picker: newPicker(mode, 1, vip), sticky: newSticky(mode)}
				tab := &table{eps: eps, affinity: affinity}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					_, hold := p.choose(sp, tab, clients[i%len(clients)])
					if hold != nil {
						hold.release(time.Now())
					}
				}
			})
		}
	}
}
