package labtest

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildPinlab builds the pinlab command (without the race detector, as
// users build it) into a temporary directory of t and returns its path.
// It fails t when the build fails. The build runs `go build` in the test's
// working directory, which must be inside this module.
func BuildPinlab(t testing.TB) string {
	t.Helper()
	pinlab := filepath.Join(t.TempDir(), "pinlab")
	build := exec.Command("go", "build", "-o", pinlab, "github.com/pinlab/pinlab/cmd/pinlab")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return pinlab
}
