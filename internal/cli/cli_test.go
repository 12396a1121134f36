package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLabRunFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    LabRunOptions
		wantErr string
	}{
		{name: "defaults", args: nil, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off"}},
		{name: "file and flags", args: []string{"my.yaml", "-o", "json", "--variant", "a,b", "--sequential", "--seed", "7", "--progress", "off", "--log-level", "debug"},
			want: LabRunOptions{File: "my.yaml", Output: "json", Variants: []string{"a", "b"}, Sequential: true, Seed: 7, Progress: "off", LogLevel: "debug"}},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: `--log-level "loud"`},
		{name: "bad output", args: []string{"-o", "xml"}, wantErr: `-o "xml"`},
		{name: "two files", args: []string{"a.yaml", "b.yaml"}, wantErr: "at most one scenario"},
		{name: "unknown flag", args: []string{"--fast"}, wantErr: "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *LabRunOptions
			cmd := NewCmdLabRun(&bytes.Buffer{}, &bytes.Buffer{}, func(_ context.Context, o *LabRunOptions) error {
				got = o
				return nil
			})
			cmd.SetArgs(tt.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.Out, got.Err = nil, nil
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMainExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\nkind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{name: "missing file", args: []string{"lab", "run", filepath.Join(dir, "none.yaml")}, code: ExitError, stderr: "no such file"},
		{name: "yaml does not parse", args: []string{"lab", "run", bad}, code: ExitError, stderr: "bad.yaml:5: document 2"},
		{name: "bad flag", args: []string{"lab", "run", "--nope"}, code: ExitUsage, stderr: "unknown flag"},
		{name: "unknown variant", args: []string{"lab", "run", "--variant", "nope"}, code: ExitError, stderr: `no variant "nope"`},
		{name: "help", args: []string{"--help"}, code: ExitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := Main(tt.args, &out, &errb); code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("stderr %q does not contain %q", errb.String(), tt.stderr)
			}
		})
	}
}

func TestSplitRef(t *testing.T) {
	tests := []struct {
		args       []string
		kind, name string
		wantErr    bool
	}{
		{args: []string{"deployment/pricing"}, kind: "Deployment", name: "pricing"},
		{args: []string{"sts/db"}, kind: "StatefulSet", name: "db"},
		{args: []string{"pod", "db-0"}, kind: "Pod", name: "db-0"},
		{args: []string{"Pods/db-0"}, kind: "Pod", name: "db-0"},
		{args: []string{"pricing"}, wantErr: true},
		{args: []string{"ingress/x"}, wantErr: true},
		{args: []string{"pod/"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			kind, name, err := splitRef(tt.args)
			if (err != nil) != tt.wantErr || kind != tt.kind || name != tt.name {
				t.Errorf("splitRef(%q) = %q, %q, %v", tt.args, kind, name, err)
			}
		})
	}
}

func TestCtlWithoutLab(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"lab", "get", "pods", "--control", freeAddr(t)}, &out, &errb)
	if code != ExitError || !strings.Contains(errb.String(), "no lab answers") {
		t.Errorf("exit %d, stderr %q; want an error saying no lab answers", code, errb.String())
	}
	code = Main([]string{"lab", "get", "ingresses"}, &out, &errb)
	if code != ExitUsage {
		t.Errorf("unknown kind: exit %d, want %d", code, ExitUsage)
	}
}
