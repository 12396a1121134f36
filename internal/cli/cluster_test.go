package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/labtest"
)

// TestClusterRunBadInput: bad flags and scenarios are usage errors naming
// what is wrong, before any call to a cluster (the kubeconfig names none).
func TestClusterRunBadInput(t *testing.T) {
	none := filepath.Join(t.TempDir(), "no-kubeconfig")
	img := "registry.example/acme/pinlab@sha256:" + strings.Repeat("0", 64)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "no scenario", args: []string{"--image", img}, want: "cluster run takes one scenario, got 0"},
		{name: "no image", args: []string{"scale-out"}, want: "--image: required"},
		{name: "bad output", args: []string{"scale-out", "--image", img, "-o", "yaml"}, want: `-o "yaml": expected table or json`},
		{name: "empty variant", args: []string{"scale-out", "--image", img, "--variant", ""}, want: "--variant: an empty variant name"},
		{name: "unknown variant", args: []string{"scale-out", "--image", img, "--variant", "nope", "--kubeconfig", none}, want: "--variant"},
		{name: "a lab-only scenario", args: []string{"l7-proxy", "--image", img, "--kubeconfig", none}, want: "l7Proxy"},
		{name: "no such scenario", args: []string{"no-such", "--image", img, "--kubeconfig", none}, want: "no-such"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb labtest.Buffer
			code := run(context.Background(), append([]string{"cluster", "run"}, tt.args...), &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want an error and %q", code, errb.String(), tt.want)
			}
			if strings.Contains(errb.String(), "creates on the API server") {
				t.Errorf("it went as far as asking: %q", errb.String())
			}
		})
	}
}
