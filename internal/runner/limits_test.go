package runner

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/pinlab/pinlab/internal/plan"
)

// TestFDNeed: the file descriptors a variant needs, by how its clients
// connect.
func TestFDNeed(t *testing.T) {
	headless := plan.Target{Headless: true, PeakPods: 50}
	vip := plan.Target{PeakPods: 50}
	grpc := plan.Settings{Protocol: plan.ProtocolGRPC}
	tests := []struct {
		name string
		g    plan.Group
		want int // beyond the lab and its pods
	}{
		{"headless round_robin: a connection per pod per client, both ends", plan.Group{Clients: 200, Target: headless, Policy: "round_robin", Settings: grpc}, 200 * 50 * 2},
		{"headless pick_first: one connection", plan.Group{Clients: 200, Target: headless, Policy: "pick_first", Settings: grpc}, 200 * 2},
		{"ClusterIP: one connection through kube-proxy's relay", plan.Group{Clients: 200, Target: vip, Policy: "round_robin", Settings: grpc}, 200 * 4},
		{"HTTP pool: up to its limit", plan.Group{Clients: 10, Target: vip, Settings: plan.Settings{Protocol: plan.ProtocolHTTP, MaxConnsPerHost: 8}}, 10 * 8 * 4},
		{"L7 sidecars: one connection each to the proxy, each proxy to every pod", plan.Group{Clients: 4, Target: vip,
			Settings: plan.Settings{Protocol: plan.ProtocolGRPC, L7Proxy: &plan.L7Proxy{Placement: "sidecar"}}}, 4*2 + 50*2*4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := plan.Variant{PeakPods: 50, Groups: []plan.Group{tt.g}}
			got, _ := fdNeed(v)
			if want := tt.want + plan.FDsPerLab + plan.FDsPerPod*50; got != want {
				t.Errorf("fdNeed = %d, want %d", got, want)
			}
		})
	}
}

// ensureFilesChild, set in the environment, makes the test binary a child
// that lowers its own file limit to 200 (soft and hard), asks
// EnsureFiles for 1000 and prints what it got and whether it may raise
// the hard limit at all.
const ensureFilesChild = "PINLAB_TEST_ENSURE_FILES"

func init() {
	if os.Getenv(ensureFilesChild) == "" {
		return
	}
	lim := syscall.Rlimit{Cur: 200, Max: 200}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("setrlimit:", err)
		os.Exit(1)
	}
	limit, ok := EnsureFiles(1000)
	var after syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after)
	fmt.Printf("limit=%d ok=%v soft=%d hard=%d\n", limit, ok, after.Cur, after.Max)
	os.Exit(0)
}

// TestEnsureFiles: with a limit of 200, room for 1000 descriptors raises
// the limit to 1250 where the process may raise its hard limit
// (CAP_SYS_RESOURCE), and is refused, leaving 200, where it may not; a
// need within 90% of the limit is granted as it is.
func TestEnsureFiles(t *testing.T) {
	if limit, ok := EnsureFiles(1); !ok || limit == 0 {
		t.Errorf("EnsureFiles(1) = %d, %v; want the limit, true", limit, ok)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ensureFilesChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	want := "limit=200 ok=false soft=200 hard=200"
	if mayRaiseHardLimit() {
		want = "limit=1250 ok=true soft=1250 hard=1250"
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("child printed %q, want %q", got, want)
	}
}

// mayRaiseHardLimit reports whether this process holds CAP_SYS_RESOURCE
// (bit 24 of CapEff in /proc/self/status).
func mayRaiseHardLimit() bool {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<24) != 0
		}
	}
	return false
}
