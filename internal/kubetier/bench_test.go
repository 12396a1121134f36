package kubetier

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkTenReadyPods measures a Deployment of 10 pods from its creation
// through the API server to every pod Ready, listed by the real
// EndpointSlice controller and served by kube-proxy (ns/op is that time).
func BenchmarkTenReadyPods(b *testing.B) {
	if skip != "" {
		b.Skip(skip)
	}
	for i := range b.N {
		ns := fmt.Sprintf("bench-ten-%d-%d", time.Now().UnixNano(), i)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		if err := theLab.Apply(ctx, pricing(ns, 10)); err != nil {
			b.Fatal(err)
		}
		if err := theLab.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		theLab.Cluster.Client().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		waitGone(b, ctx, ns)
		cancel()
		b.StartTimer()
	}
}

// BenchmarkRSS300Pods reports the resident memory of the tier (the control
// plane's processes and the process running the lab: the node agent with
// its pods, kube-proxy, the DNS) idle and with 300 Ready pods.
func BenchmarkRSS300Pods(b *testing.B) {
	if skip != "" {
		b.Skip(skip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cpIdle, labIdle := tierRSS(b)
	ns := fmt.Sprintf("bench-300-%d", time.Now().UnixNano())
	for range b.N {
		if err := theLab.Apply(ctx, pricing(ns, 300)); err != nil {
			b.Fatal(err)
		}
		if err := theLab.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cp300, lab300 := tierRSS(b)
	b.ReportMetric(cpIdle/(1<<20), "cp-idle-MB")
	b.ReportMetric(labIdle/(1<<20), "lab-idle-MB")
	b.ReportMetric(cp300/(1<<20), "cp-300pods-MB")
	b.ReportMetric(lab300/(1<<20), "lab-300pods-MB")
	theLab.Cluster.Client().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	waitGone(b, ctx, ns)
}

// tierRSS returns the control plane's and this process's resident bytes.
func tierRSS(b *testing.B) (controlPlane, self float64) {
	b.Helper()
	rss, err := cp.RSS()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range rss {
		controlPlane += float64(n)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			self = kb * 1024
		}
	}
	return controlPlane, self
}

// waitGone waits until namespace ns and its pods are gone.
func waitGone(b *testing.B, ctx context.Context, ns string) {
	for ctx.Err() == nil {
		if _, err := theLab.Cluster.Client().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("namespace %s not gone", ns)
}
