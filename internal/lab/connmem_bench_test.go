package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"k8s.io/apimachinery/pkg/labels"
)

// BenchmarkConnectionMemory measures what one idle gRPC connection costs
// on each side, as in the 200 clients x 50 pods headless
// round_robin fan-out: clients channels, each with round_robin over every
// pod's address (one connection per pod, as grpc-go's dns resolver gives a
// headless Service), from their own source addresses. It reports per
// connection: the Go heap and stacks in use (conn-KiB), the heap split by
// side from a heap profile of the connecting (client-heap-KiB: stacks
// through grpc-go's http2Client; server-heap-KiB: through its http2Server
// and grpc.Server), the goroutines on each side, and the process's RSS
// growth (rss-KiB). Both ends live in this process, as in a lab.
func BenchmarkConnectionMemory(b *testing.B) {
	for _, c := range []struct{ clients, pods int }{{20, 50}, {100, 50}} {
		b.Run(fmt.Sprintf("clients=%d/pods=%d", c.clients, c.pods), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchConnectionMemory(b, c.clients, c.pods)
			}
		})
	}
}

func benchConnectionMemory(b *testing.B, clients, pods int) {
	b.StopTimer()
	l := startLab(b, Config{}, pricing(int32(pods)))
	f := l.Cluster.Factory()
	ps, _ := f.Core().V1().Pods().Lister().List(labels.Everything())
	var addrs []resolver.Address
	for _, p := range ps {
		addrs = append(addrs, resolver.Address{Addr: net.JoinHostPort(p.Status.PodIP, "8471")})
	}
	if len(addrs) != pods {
		b.Fatalf("%d pods, want %d", len(addrs), pods)
	}
	conns := clients * pods
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	before := sampleMemory(b)
	client0, server0 := heapBySide()
	b.StartTimer()
	ccs := make([]*grpc.ClientConn, 0, clients)
	defer func() {
		for _, cc := range ccs {
			cc.Close()
		}
	}()
	for i := range clients {
		r := manual.NewBuilderWithScheme(fmt.Sprintf("mem%d", i))
		r.InitialState(resolver.State{Addresses: addrs})
		d := loopback.Dialer{Source: netip.AddrFrom4([4]byte{127, 249, byte(i >> 8), byte(i&0xff) + 1})}
		cc, err := grpc.NewClient(r.Scheme()+":///pricing",
			grpc.WithResolvers(r),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, a) }))
		if err != nil {
			b.Fatal(err)
		}
		cc.Connect()
		ccs = append(ccs, cc)
	}
	// Every connection has two descriptors here, one per end.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := labtest.Poll(ctx, 50*time.Millisecond, func() bool { return openFiles() >= before.files+2*conns }); err != nil {
		b.Fatalf("%d of %d connections open: %v", (openFiles()-before.files)/2, conns, err)
	}
	b.StopTimer()
	time.Sleep(time.Second) // settle: first pings and window updates
	after := sampleMemory(b)
	client, server := heapBySide()
	client, server = client-client0, server-server0
	per := func(v float64) float64 { return v / float64(conns) }
	b.ReportMetric(per(float64(after.heapStack-before.heapStack))/1024, "conn-KiB")
	b.ReportMetric(per(float64(client))/1024, "client-heap-KiB")
	b.ReportMetric(per(float64(server))/1024, "server-heap-KiB")
	b.ReportMetric(per(float64(after.clientG-before.clientG)), "client-goroutines")
	b.ReportMetric(per(float64(after.serverG-before.serverG)), "server-goroutines")
	b.ReportMetric(per(float64(after.rssKiB-before.rssKiB)), "rss-KiB")
	b.ReportMetric(0, "ns/op")
}

type memSample struct {
	heapStack        uint64 // heap in use plus goroutine stacks, bytes
	rssKiB           int
	files            int
	clientG, serverG int // goroutines in grpc-go's client and server transports
}

func sampleMemory(b *testing.B) memSample {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s := memSample{heapStack: m.HeapInuse + m.StackInuse, files: openFiles()}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fmt.Sscan(v, &s.rssKiB)
		}
	}
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch side(g) {
		case "client":
			s.clientG++
		case "server":
			s.serverG++
		}
	}
	return s
}

// side says which end of a gRPC connection a stack (a goroutine's or an
// allocation's) belongs to, from grpc-go's transport and server types.
func side(stack string) string {
	switch {
	case strings.Contains(stack, "http2Client"), strings.Contains(stack, "newHTTP2Client"),
		strings.Contains(stack, "addrConn"):
		return "client"
	case strings.Contains(stack, "http2Server"), strings.Contains(stack, "NewServerTransport"),
		strings.Contains(stack, "grpc.(*Server)"):
		return "server"
	}
	return ""
}

// heapBySide sums the heap in use that the memory profile attributes to
// each side's stacks (every allocation made while the profile rate is 1 is in it; the
// profile is as of the last garbage collection).
func heapBySide() (client, server int64) {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	for _, r := range recs {
		var sb strings.Builder
		for _, pc := range r.Stack() {
			if fn := runtime.FuncForPC(pc); fn != nil {
				sb.WriteString(fn.Name())
				sb.WriteByte('\n')
			}
		}
		switch side(sb.String()) {
		case "client":
			client += r.InUseBytes()
		case "server":
			server += r.InUseBytes()
		}
	}
	return client, server
}

func openFiles() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}
