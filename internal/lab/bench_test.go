package lab

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/podtest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// callers is the number of concurrent closed-loop callers sharing one
// channel in BenchmarkVIPvsDirect.
const callers = 32

// BenchmarkVIPvsDirect measures GetPrice calls/s on one gRPC channel dialled
// straight at the pod and through the Service's ClusterIP (kube-proxy
// emulation) in the same run, alternating in chunks so machine noise hits
// both alike, and reports the ratio (kube-proxy's old userspace mode managed
// 0.36 of direct, iptables mode 0.96).
func BenchmarkVIPvsDirect(b *testing.B) {
	l := startLab(b, Config{}, pricing(1))
	f := l.Cluster.Factory()
	pods, _ := f.Core().V1().Pods().Lister().List(labels.Everything())
	svc, err := f.Core().V1().Services().Lister().Services("shop").Get("pricing")
	if err != nil || len(pods) != 1 {
		b.Fatalf("setup: %d pods, %v", len(pods), err)
	}
	direct := dialBench(b, pods[0].Status.PodIP+":8471")
	vip := dialBench(b, svc.Spec.ClusterIP+":8471")
	podtest.CompareThroughput(b, direct, vip, "vip", callers)
}

// dialBench returns a client of addr that has made one call.
func dialBench(b *testing.B, addr string) pricingv1.PricingClient {
	c := pricingv1.NewPricingClient(podtest.Dial(b, addr, netip.MustParseAddr("127.249.255.1")))
	if _, err := c.GetPrice(context.Background(), &pricingv1.GetPriceRequest{}); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkStartup measures a lab's start-up: from nothing to a Deployment
// of n Ready pods behind both Services, with the data plane serving them.
// 1000 pods is the most a scenario may run per variant. cpu-ms is the
// process's CPU time over the same span (user and system), which other
// load on the machine changes less than the wall time.
func BenchmarkStartup(b *testing.B) {
	for _, n := range []int32{10, 1000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) { benchStartup(b, n) })
	}
}

func benchStartup(b *testing.B, n int32) {
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		start, cpu0 := time.Now(), cpuTime(b)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		l, err := Start(ctx, Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Apply(ctx, pricing(n)); err != nil {
			b.Fatal(err)
		}
		if err := l.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		cpu += cpuTime(b) - cpu0
		cancel()
		b.StopTimer()
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-ready")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms")
}

// cpuTime returns the CPU time the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdlePodMemory measures the heap and goroutines each idle pod
// costs: a lab with 50 ready pods against the same lab with none.
func BenchmarkIdlePodMemory(b *testing.B) {
	const pods = 50
	var kib, gor float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l := startLab(b, Config{}, pricing(0))
		heap0, g0 := heapAndGoroutines()
		b.StartTimer()
		scaleAndWait(b, l, pods)
		b.StopTimer()
		heap1, g1 := heapAndGoroutines()
		kib += float64(heap1-heap0) / pods / 1024
		gor += float64(g1-g0) / pods
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(kib/float64(b.N), "KiB/pod")
	b.ReportMetric(gor/float64(b.N), "goroutines/pod")
}

func scaleAndWait(b *testing.B, l *Lab, n int32) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.Scale(ctx, "Deployment", "shop", "pricing", n); err != nil {
		b.Fatal(err)
	}
	err := labtest.Poll(ctx, 20*time.Millisecond, func() bool {
		d, err := l.Cluster.Client().AppsV1().Deployments("shop").Get(ctx, "pricing", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == n
	})
	if err == nil {
		err = l.WaitReady(ctx)
	}
	if err != nil {
		b.Fatal(err)
	}
}

func heapAndGoroutines() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, runtime.NumGoroutine()
}
