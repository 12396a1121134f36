package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/stats"
)

// savedResult writes a small result as lab run -o json does and returns
// the file and the result.
func savedResult(t *testing.T) (string, *report.Result) {
	t.Helper()
	res := &report.Result{Scenario: "tiny", Source: "tiny.yaml", Duration: 4, Seed: 3, SideBySide: true,
		Windows: []report.WindowSpec{{Name: "all", From: 1, To: 4}},
		Variants: []report.Variant{{Name: "only", State: "done", Summary: stats.Summary{
			End: stats.Offset(4e9), Timeline: map[string][]int64{"web-a": {10, 10, 10, 10}},
			Windows: []stats.WindowStats{{Name: "all", From: 1, To: 4, Calls: 30, Rate: 10,
				Pods: []stats.PodStats{{Name: "web-a", IP: "127.244.0.2", Ordinal: 1, Calls: 30, Rate: 10, Share: 1}}}},
		}}},
	}
	path := filepath.Join(t.TempDir(), "result.json")
	var buf bytes.Buffer
	if err := report.JSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, res
}

func TestReport(t *testing.T) {
	path, res := savedResult(t)
	var want bytes.Buffer
	if err := report.HTML(&want, res); err != nil {
		t.Fatal(err)
	}
	var wantText bytes.Buffer
	if err := report.Text(&wantText, res); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(t.TempDir(), "report.html")
	tests := []struct {
		name     string
		args     []string
		stdin    string
		code     int
		stdout   string
		stderr   string
		wantHTML bool
	}{
		{name: "text", args: []string{"report", path}, stdout: wantText.String()},
		{name: "html", args: []string{"report", path, "--html", html}, wantHTML: true},
		{name: "no file", args: []string{"report", filepath.Join(t.TempDir(), "none.json")}, code: ExitUsage, stderr: "no such file"},
		{name: "no argument", args: []string{"report"}, code: ExitUsage, stderr: "takes one result file"},
		{name: "not a result", args: []string{"report", "-"}, stdin: `{"pods": 3}`, code: ExitError, stderr: `standard input: report: not a pinlab lab run -o json result: json: unknown field "pods"`},
		{name: "html to a missing directory", args: []string{"report", path, "--html", filepath.Join(t.TempDir(), "no", "r.html")}, code: ExitUsage, stderr: "--html: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(html)
			var out, errb bytes.Buffer
			cmd := NewRootCmd(&out, &errb)
			cmd.SetIn(strings.NewReader(tt.stdin))
			cmd.SetArgs(tt.args)
			code := codeOf(context.Background(), cmd.Execute(), &errb)
			if code != tt.code || !strings.Contains(errb.String(), tt.stderr) {
				t.Fatalf("exit code %d, stderr %q; want %d and %q", code, errb.String(), tt.code, tt.stderr)
			}
			if tt.stdout != "" && out.String() != tt.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), tt.stdout)
			}
			if tt.wantHTML {
				got, err := os.ReadFile(html)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want.Bytes()) {
					t.Errorf("the HTML file is not the report of the result (%d bytes, want %d)", len(got), want.Len())
				}
			}
		})
	}
}
