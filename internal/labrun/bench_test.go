package labrun_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labrun"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/scenarios"
)

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runFile runs the scenario in file with opts, timing its CPU.
func runFile(b *testing.B, file string, variants []string) (*report.Result, time.Duration, time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cpu0, wall0 := cpuTime(), time.Now()
	res, err := labrun.Run(ctx, labrun.Options{Scenario: file, Variants: variants})
	if err != nil {
		b.Fatal(err)
	}
	return res, cpuTime() - cpu0, time.Since(wall0)
}

// windowOf is variant v's window name.
func windowOf(b *testing.B, res *report.Result, v, name string) stats.WindowStats {
	b.Helper()
	for _, rv := range res.Variants {
		if rv.Name != v {
			continue
		}
		for _, w := range rv.Summary.Windows {
			if w.Name == name {
				return w
			}
		}
	}
	b.Fatalf("no window %s of variant %s", name, v)
	return stats.WindowStats{}
}

// writeScaleOut writes the built-in scale-out scenario cut to 20 s (the
// scale at 10 s; windows before 3-10 s, after-scale 12-16 s, settled
// 16-20 s) and returns its path.
func writeScaleOut(b *testing.B) string {
	b.Helper()
	data, ok := scenarios.Get("scale-out")
	if !ok {
		b.Fatal("no built-in scale-out")
	}
	y := strings.NewReplacer("duration: 60s", "duration: 20s", "    from: 13s\n    to: 28s", "    from: 12s\n    to: 16s",
		"    from: 40s\n    to: 60s", "    from: 16s\n    to: 20s").Replace(string(data))
	if !strings.Contains(y, "duration: 20s") || !strings.Contains(y, "to: 16s") || strings.Contains(y, "to: 60s") {
		b.Fatal("the built-in scale-out changed shape; update writeScaleOut")
	}
	path := filepath.Join(b.TempDir(), "scale-out-20s.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkSideBySide runs the built-in scale-out, cut to 20 s, with one
// variant (headless-rr) and then with its five variants side by side, one
// after the other, and reports headless-rr's p50 and p99 latency in each
// window both ways and their ratios (five / one), with the CPU each run
// used and whether the machine was overloaded; with -benchtime Nx it
// runs N rounds, one then five, and reports the medians. Not a timed
// test: it prints what it measured.
//
//	go test ./internal/labrun -run '^$' -bench SideBySide -benchtime 1x
func BenchmarkSideBySide(b *testing.B) {
	file := writeScaleOut(b)
	ratios := map[string][]float64{}
	for range b.N {
		one, cpu1, wall1 := runFile(b, file, []string{"headless-rr"})
		five, cpu5, wall5 := runFile(b, file, nil)
		b.Logf("one variant: CPU %.1f s over %.1f s; five side by side: CPU %.1f s over %.1f s (overloaded: %v, %v)",
			cpu1.Seconds(), wall1.Seconds(), cpu5.Seconds(), wall5.Seconds(), one.Overloaded, five.Overloaded)
		for _, w := range []string{"before", "after-scale", "settled"} {
			a, f := windowOf(b, one, "headless-rr", w), windowOf(b, five, "headless-rr", w)
			b.Logf("window %-11s headless-rr p50 %.2f ms alone, %.2f ms beside four (x%.2f); p99 %.2f ms, %.2f ms (x%.2f); machine CPU %.0f%%, %.0f%%",
				w, a.LatencyP50, f.LatencyP50, f.LatencyP50/a.LatencyP50, a.LatencyP99, f.LatencyP99, f.LatencyP99/a.LatencyP99, 100*a.MachineCPU, 100*f.MachineCPU)
			ratios[w+"-p50-ratio"] = append(ratios[w+"-p50-ratio"], f.LatencyP50/a.LatencyP50)
			ratios[w+"-p99-ratio"] = append(ratios[w+"-p99-ratio"], f.LatencyP99/a.LatencyP99)
		}
		ratios["cpu-ratio"] = append(ratios["cpu-ratio"], cpu5.Seconds()/cpu1.Seconds())
	}
	for unit, rs := range ratios { // medians over the -benchtime rounds
		slices.Sort(rs)
		b.ReportMetric(rs[len(rs)/2], unit)
	}
}

// capacityScenario is 4 pods behind a ClusterIP and a headless Service and
// 4 clients offering rate calls/s in all for 10 s, on path "clusterip"
// (pick_first through the ClusterIP) or "headless" (round_robin over the
// pods).
func capacityScenario(b *testing.B, path string, rate int) string {
	b.Helper()
	data, _ := scenarios.Get("scale-out")
	objects := string(data)[:strings.Index(string(data), "apiVersion: pinlab.dev/v1alpha1")]
	objects = strings.Replace(objects, "replicas: 2", "replicas: 4", 1)
	target, policy := "pricing.shop.svc.cluster.local:8471", "pick_first"
	if path == "headless" {
		target, policy = "dns:///pricing-headless.shop.svc.cluster.local:8471", "round_robin"
	}
	y := objects + fmt.Sprintf(`apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: capacity}
spec:
  duration: 10s
  clients:
  - {name: c, namespace: shop, count: 4, target: %q, policy: %s, rate: %d}
  windows:
  - {name: steady, from: 2s, to: 10s}
`, target, policy, rate/4)
	file := filepath.Join(b.TempDir(), fmt.Sprintf("capacity-%s-%d.yaml", path, rate))
	if err := os.WriteFile(file, []byte(y), 0o644); err != nil {
		b.Fatal(err)
	}
	return file
}

// BenchmarkCapacity finds the most calls per second one variant sustains
// on this machine through a ClusterIP and over a headless Service: it
// offers 1000 to 8000 calls/s in all (4 clients, 4 pods, 10 s a step) and
// reports, per path, the highest rate with no failed call and no
// overload, with its p50, p99 and the CPU it used; it logs every step.
//
//	go test ./internal/labrun -run '^$' -bench Capacity -benchtime 1x
func BenchmarkCapacity(b *testing.B) {
	for range b.N {
		for _, path := range []string{"clusterip", "headless"} {
			best := 0
			for _, rate := range []int{1000, 2000, 4000, 6000, 8000} {
				res, cpu, wall := runFile(b, capacityScenario(b, path, rate), nil)
				w := windowOf(b, res, "base", "steady")
				ok := w.Failed == 0 && !res.Overloaded
				b.Logf("%-9s %5d calls/s offered: %.0f served, p50 %.2f ms, p99 %.2f ms, %d failed, schedule lag p99 %.1f ms, CPU %.2f of %d cores, overloaded %v",
					path, rate, w.Rate, w.LatencyP50, w.LatencyP99, w.Failed, w.LagP99, cpu.Seconds()/wall.Seconds(), runtime.NumCPU(), res.Overloaded)
				if !ok {
					break
				}
				best = rate
			}
			b.ReportMetric(float64(best), path+"-calls/s")
		}
	}
}
