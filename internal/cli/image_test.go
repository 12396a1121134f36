package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/labtest"
)

// TestImageBuildBadInput: bad flags are usage errors naming the flag,
// before anything is compiled.
func TestImageBuildBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "not linux", args: []string{"--platforms", "darwin/arm64"}, want: `--platforms: "darwin/arm64" is not linux/ARCH`},
		{name: "no arch", args: []string{"--platforms", "linux"}, want: `--platforms: "linux" is not linux/ARCH`},
		{name: "a variant", args: []string{"--platforms", "linux/arm/v7"}, want: `"linux/arm/v7" is not linux/ARCH`},
		{name: "no such arch", args: []string{"--platforms", "linux/amd64,linux/foo"}, want: `"linux/foo" is not linux/ARCH with ARCH one of 386, amd64`},
		{name: "twice", args: []string{"--platforms", "linux/amd64,linux/amd64"}, want: "linux/amd64 is given twice"},
		{name: "none", args: []string{"--platforms", ""}, want: "give at least one"},
		{name: "bad reference", args: []string{"--push", "Ghcr.io/UPPER case"}, want: `--push "Ghcr.io/UPPER case"`},
		{name: "a digest to push to", args: []string{"--push", "127.0.0.1:5000/acme/pinlab@sha256:" + strings.Repeat("0", 64)}, want: "give a repository and tag"},
		{name: "a layout where none can be written", args: []string{"--oci-layout", "/proc/pinlab-layout"}, want: "--oci-layout /proc/pinlab-layout"},
		{name: "an argument", args: []string{"extra"}, want: `takes no arguments, got ["extra"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb labtest.Buffer
			code := run(context.Background(), append([]string{"image", "build"}, tt.args...), &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errb.String(), ExitUsage, tt.want)
			}
			if strings.Contains(out.String(), "building") {
				t.Errorf("it began building: %q", out.String())
			}
		})
	}
}
