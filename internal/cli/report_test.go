package cli

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/exit"
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
		{name: "html to a missing directory", args: []string{"report", path, "--html", filepath.Join(t.TempDir(), "no", "r.html")}, code: ExitUsage, stderr: "cannot create a file in"},
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

// TestHTMLKeptWhenKilled: a run killed before its report leaves an HTML
// file already at --html's path as it was, and no file of its own (a
// tester found it emptied when the run started).
func TestHTMLKeptWhenKilled(t *testing.T) {
	pinlab := buildPinlab(t)
	dir := t.TempDir()
	html := filepath.Join(dir, "report.html")
	if err := os.WriteFile(html, []byte("KEEP ME"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pinlab, "lab", "run", writeScenario(t, 20*time.Second, 5*time.Second), "--variant", "clusterip", "--html", html, "--progress", "on")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			if strings.Contains(sc.Text(), "running") {
				once.Do(func() { close(running) })
			}
		}
	}()
	select {
	case <-running:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the run did not start within a minute")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if b, err := os.ReadFile(html); err != nil || string(b) != "KEEP ME" {
		t.Errorf("--html %s after the run was killed: %q, %v; want it as it was", html, b, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v; want only report.html", dir, names)
	}
}

// TestHTMLPathChecked: --html refuses, before anything runs, a path that
// is no regular file (a tester's run as root replaced /dev/full with its
// report), an empty one and one it cannot create a file beside, naming
// the path given; a symlink writes the file it leads to.
func TestHTMLPathChecked(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "real.html")
	if err := os.WriteFile(real, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link.html")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr, wantTarget string
	}{
		{name: "a character device", path: "/dev/full", wantErr: "--html /dev/full: is a character device, not a regular file"},
		{name: "a named pipe", path: filepath.Join(dir, "fifo"), wantErr: "is a named pipe, not a regular file"},
		{name: "a directory", path: dir, wantErr: "is a directory"},
		{name: "a missing directory", path: filepath.Join(dir, "no", "r.html"), wantErr: "--html " + filepath.Join(dir, "no", "r.html") + ": cannot create a file in " + filepath.Join(dir, "no") + ": no such file or directory"},
		{name: "a new file", path: filepath.Join(dir, "new.html"), wantTarget: filepath.Join(dir, "new.html")},
		{name: "a symlink", path: filepath.Join(dir, "link.html"), wantTarget: real},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := createHTML(tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !exit.IsUsage(err) {
					t.Fatalf("createHTML(%s) = %v, want a usage error containing %q", tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil || h.path != tt.wantTarget {
				t.Fatalf("createHTML(%s) = %+v, %v; want the file %s", tt.path, h, err, tt.wantTarget)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"lab", "run", "--html", "", "--progress", "off"}, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), "--html: an empty path") {
		t.Errorf("lab run --html '': exit %d, %q; want a usage error", code, errb.String())
	}
}
