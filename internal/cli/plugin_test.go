package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlPluginName: the pinlab binary installed as kubectl-pinlab (as
// krew installs it) calls itself `kubectl pinlab` in its help; installed as
// pinlab, `pinlab`.
func TestKubectlPluginName(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pinlab")
	}
	bin := buildPinlab(t)
	plugin := filepath.Join(t.TempDir(), "kubectl-pinlab")
	if err := os.Symlink(bin, plugin); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want, not string }{
		{plugin, "kubectl pinlab diagnose SERVICE", "\n  pinlab diagnose"},
		{bin, "pinlab diagnose SERVICE", "kubectl pinlab"},
	} {
		out, err := exec.Command(tc.path, "diagnose", "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), tc.not) {
			t.Errorf("%s diagnose --help: %v; want %q and not %q in:\n%s", filepath.Base(tc.path), err, tc.want, tc.not, out)
		}
	}
}
