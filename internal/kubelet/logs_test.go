package kubelet

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pinlab/pinlab/internal/cluster"
)

// logText returns the lines of a container's log so far, joined.
func logText(t *testing.T, k *Kubelet, name string, previous bool) string {
	t.Helper()
	l, err := k.Logs("default", name, previous)
	if err != nil {
		t.Fatal(err)
	}
	lines, _, _, _ := l.Read(0)
	var b strings.Builder
	for _, ln := range lines {
		b.WriteString(ln.Text + "\n")
	}
	return b.String()
}

// TestLogs: a pod's container writes where it serves and when it is
// ready; a kill ends that run's log (killed, exit 137), which becomes the
// previous one, and the restarted run writes its own; the node lists the
// pod; a pod it does not run has no log.
func TestLogs(t *testing.T) {
	t.Parallel()
	c, k, _ := node(t, Config{RestartBackoff: 100 * time.Millisecond})
	p := readyPod(t, c, "talker", nil)
	first := logText(t, k, "talker", false)
	for _, want := range []string{"pinlab pod default/talker: serving gRPC (health, channelz) on " + p.Status.PodIP + ":8471, restart 0", "ready: the readiness check passed"} {
		if !strings.Contains(first, want) {
			t.Errorf("log %q, want %q in it", first, want)
		}
	}
	if _, err := k.Logs("default", "talker", true); !errors.Is(err, ErrNoLog) {
		t.Errorf("previous log before any restart: %v, want ErrNoLog", err)
	}
	if err := k.Kill("default", "talker"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "talker", "Ready after a restart", func(p *corev1.Pod, err error) bool {
		return err == nil && cluster.IsPodReady(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
	prev := logText(t, k, "talker", true)
	for _, want := range []string{"restart 0", "killed (SIGKILL)", "exited with code 137 (Error)"} {
		if !strings.Contains(prev, want) {
			t.Errorf("previous log %q, want %q in it", prev, want)
		}
	}
	if cur := logText(t, k, "talker", false); !strings.Contains(cur, "restart 1") || strings.Contains(cur, "killed") {
		t.Errorf("log after the restart %q, want the new run's lines alone", cur)
	}
	if l, _ := k.Logs("default", "talker", true); func() bool { _, _, _, closed := l.Read(0); return !closed }() {
		t.Error("the killed run's log is still open")
	}
	if pods := k.Pods(); len(pods) != 1 || pods[0].Name != "talker" {
		t.Errorf("Pods() = %v, want talker", pods)
	}
	if _, err := k.Logs("default", "nobody", false); !errors.Is(err, ErrNoPod) {
		t.Errorf("log of a pod not run here: %v, want ErrNoPod", err)
	}
}
