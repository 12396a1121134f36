package kubetier

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/cli"
)

// BenchmarkDiagnoseAgents300 times pinlab diagnose, as a user runs it
// (--window 5s), on a 300-pod Service whose pods serve no channelz, while
// one client calls it: the first run adds 300 agents, the others reuse
// them. It reports seconds a run beyond the window ("s-over-window").
// Run it alone (it starts 300 pods):
//
//	go test ./internal/kubetier -run '^$' -bench DiagnoseAgents300 -benchtime 2x
func BenchmarkDiagnoseAgents300(b *testing.B) {
	ns := "bench-agents"
	setUp(b, ns, 300, "--no-channelz")
	source, err := clientIP()
	if err != nil {
		b.Fatal(err)
	}
	stop := startLoad(b, ns, source)
	defer stop()
	const window = 5 * time.Second
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		began := time.Now()
		code := cli.Main([]string{"diagnose", "pricing", "-n", ns, "--kubeconfig", kubeconfig, "--window", window.String(),
			"--agent-image", "registry.example/tools/pinlab-agent:bench", "--yes"}, io.Discard, io.Discard)
		took := time.Since(began)
		b.Logf("run %d: exit %d in %v (%.1f s beyond the window)", i, code, took.Round(100*time.Millisecond), (took - window).Seconds())
		if code != cli.ExitPinned {
			b.Fatalf("run %d: exit %d, want %d (one pick_first client through the ClusterIP)", i, code, cli.ExitPinned)
		}
		b.ReportMetric((took - window).Seconds(), "s-over-window")
	}
}

// BenchmarkDiagnoseExec300 is BenchmarkDiagnoseAgents300 without agents
// (--no-agent): every pod is read through exec, `cat /proc/net/tcp` once
// a reading, ExecParallel pods at once.
//
//	go test ./internal/kubetier -run '^$' -bench DiagnoseExec300 -benchtime 2x
func BenchmarkDiagnoseExec300(b *testing.B) {
	ns := "bench-exec"
	setUp(b, ns, 300, "--no-channelz")
	source, err := clientIP()
	if err != nil {
		b.Fatal(err)
	}
	stop := startLoad(b, ns, source)
	defer stop()
	const window = 5 * time.Second
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		began := time.Now()
		var out strings.Builder
		code := cli.Main([]string{"diagnose", "pricing", "-n", ns, "--kubeconfig", kubeconfig, "--window", window.String(), "--no-agent"}, &out, io.Discard)
		took := time.Since(began)
		b.Logf("run %d: exit %d in %v (%.1f s beyond the window)", i, code, took.Round(100*time.Millisecond), (took - window).Seconds())
		if code != cli.ExitPinned || !strings.Contains(out.String(), "read through exec") {
			b.Fatalf("run %d: exit %d, want %d (one pick_first client through the ClusterIP), read through exec:\n%s", i, code, cli.ExitPinned, out.String())
		}
		b.ReportMetric((took - window).Seconds(), "s-over-window")
	}
}
