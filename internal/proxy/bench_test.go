package proxy

import (
	"strings"
	"testing"
	"time"
)

// BenchmarkRelay compares request/response round trips per second on one
// connection straight to the pod and on one through the VIP, in the same
// run, so the ratio is the relay's cost.
func BenchmarkRelay(b *testing.B) {
	l := newLab(b, Config{})
	bs := startBackends(b, "127.202.10.1")
	const vip = "127.201.77.13:18101"
	l.service("pricing", "127.201.77.13", tcpPort("grpc", 18101))
	l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], readyCond))
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
