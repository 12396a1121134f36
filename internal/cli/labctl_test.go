package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/control"
)

// TestLabCtlToken: lab up writes its token to a file only its user can
// read and prints where; the lab commands reach it with that file, and
// without it (or with another lab's) they are refused and say why. Once
// lab up is interrupted the API stops before the lab, and the file is
// gone.
func TestLabCtlToken(t *testing.T) {
	u := startLabUp(t, "dns-demo")
	addr, tokenFile := u.opts.Control, u.opts.TokenFile
	if out := u.out.String(); !strings.Contains(out, "token in "+tokenFile) || !strings.Contains(out, "--token-file "+tokenFile) {
		t.Errorf("lab up does not print the token file %s:\n%s", tokenFile, out)
	}
	if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := control.WriteToken(other, control.NewToken(), true); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir()) // no token file where lab commands look by default
	withToken := []string{"--control", addr, "--token-file", tokenFile}

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "scale", args: append([]string{"lab", "scale", "statefulset/db", "--replicas", "3", "-n", "data"}, withToken...), stdout: "statefulset/db scaled"},
		{name: "get", args: append([]string{"lab", "get", "sts", "-n", "data"}, withToken...), stdout: "db"},
		{name: "ready", args: append([]string{"lab", "ready", "pod/db-0", "-n", "data"}, withToken...), stdout: `pod "db-0" back to its readiness probe`},
		{name: "delete of no such pod", args: append([]string{"lab", "delete", "pod/nope", "-n", "data"}, withToken...), code: ExitError, stderr: "not found"},
		{name: "no token file", args: []string{"lab", "scale", "sts/db", "--replicas", "1", "-n", "data", "--control", addr}, code: ExitError, stderr: "so nothing was sent"},
		{name: "another lab's token", args: []string{"lab", "get", "pods", "--control", addr, "--token-file", other}, code: ExitError, stderr: "refused the token in " + other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := Main(tt.args, &out, &errb); code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, errb.String())
			}
			if !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("stdout %q, stderr %q; want them to contain %q and %q", out.String(), errb.String(), tt.stdout, tt.stderr)
			}
		})
	}

	// When lab up closes the lab, its API answers no more.
	var whenClosing error
	orig := labUpStopping
	t.Cleanup(func() { labUpStopping = orig })
	labUpStopping = func() { _, whenClosing = u.client.Info(context.Background()) }
	if err := u.stop(); err != nil {
		t.Fatal(err)
	}
	if whenClosing == nil || !strings.Contains(whenClosing.Error(), "no lab answers") {
		t.Errorf("the API while lab up closed the lab: %v; want it stopped first", whenClosing)
	}
	if _, err := os.Stat(tokenFile); !os.IsNotExist(err) {
		t.Errorf("token file after lab up ended: %v, want it removed", err)
	}
	var out, errb bytes.Buffer
	if code := Main(append([]string{"lab", "get", "pods"}, withToken...), &out, &errb); code != ExitError || !strings.Contains(errb.String(), "no lab answers") {
		t.Errorf("after lab up ended: exit %d, stderr %q; want no lab answering", code, errb.String())
	}
}
