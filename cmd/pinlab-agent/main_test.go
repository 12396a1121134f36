package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/pinlab/pinlab/internal/agent"
)

// mainEnv makes the test binary run main, for TestSignal.
const mainEnv = "PINLAB_AGENT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main() // exits
	}
	goleak.VerifyTestMain(m)
}

// forbidden says whether the agent may not link a package: it runs in
// every server pod diagnose looks at, so it stays small and static.
func forbidden(pkg string) bool {
	return strings.HasPrefix(pkg, "k8s.io/") || strings.Contains(pkg, "client-go") ||
		strings.Contains(pkg, "google.golang.org/grpc")
}

func TestForbidden(t *testing.T) {
	tests := []struct {
		pkg  string
		want bool
	}{
		{"k8s.io/api/core/v1", true},
		{"k8s.io/client-go/rest", true},
		{"github.com/example/client-go-lite", true},
		{"google.golang.org/grpc", true},
		{"google.golang.org/grpc/channelz", true},
		{"github.com/vishvananda/netlink", false},
		{"github.com/pinlab/pinlab/internal/agent", false},
		{"encoding/json", false},
	}
	for _, tc := range tests {
		if got := forbidden(tc.pkg); got != tc.want {
			t.Errorf("forbidden(%q) = %v, want %v", tc.pkg, got, tc.want)
		}
	}
}

// TestDeps lists the command's dependencies as built for its image
// (static, Linux) and fails on a forbidden one. The go list child's reads
// are not seen by go test's cache, but a new import changes this test
// binary too (it links the command), so a cached pass cannot hide one.
func TestDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the dependencies: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr)
	} else if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, want := range []string{"github.com/pinlab/pinlab/internal/agent", "github.com/vishvananda/netlink"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("go list -deps names no %s; does it list the agent's dependencies?\n%s", want, out)
		}
	}
	for _, dep := range deps {
		if forbidden(dep) {
			t.Errorf("pinlab-agent depends on %s; it must link no k8s.io, client-go or gRPC package", dep)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		want        agent.Options
		wantVersion bool
		wantErr     string
	}{
		{name: "defaults", want: agent.Options{Interval: time.Second}},
		{name: "ports repeated and listed", args: []string{"--port", "9090,8080", "--port=50051", "-port", "8080"},
			want: agent.Options{Ports: []int{8080, 9090, 50051}, Interval: time.Second}},
		{name: "all", args: []string{"--interval", "250ms", "--count", "3", "--proc"},
			want: agent.Options{Interval: 250 * time.Millisecond, Count: 3, Proc: true}},
		{name: "version", args: []string{"--version"}, want: agent.Options{Interval: time.Second}, wantVersion: true},
		{name: "port too big", args: []string{"--port", "70000"}, wantErr: "--port 70000: want a port 1-65535"},
		{name: "port zero in a list", args: []string{"--port", "8080,0"}, wantErr: "--port 0: want a port 1-65535"},
		{name: "port not a number", args: []string{"--port", "http"}, wantErr: "--port http: want a port 1-65535"},
		{name: "no interval", args: []string{"--interval", "0s"}, wantErr: "--interval 0s: want more than 0"},
		{name: "bad interval", args: []string{"--interval", "often"}, wantErr: `invalid value "often" for flag -interval`},
		{name: "negative count", args: []string{"--count", "-1"}, wantErr: "--count -1: want 0 (until stopped) or more"},
		{name: "unknown flag", args: []string{"--listen", ":80"}, wantErr: "flag provided but not defined: -listen"},
		{name: "argument", args: []string{"8080"}, wantErr: `unexpected argument "8080"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, version, err := agent.ParseArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("ParseArgs(%q): error %v, want %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tc.args, err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" || version != tc.wantVersion {
				t.Errorf("ParseArgs(%q): version %v, want %v; options (-want +got):\n%s", tc.args, version, tc.wantVersion, diff)
			}
		})
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // a prefix of stdout, or "" for JSON lines
		wantLines  int
		wantStderr string
	}{
		{name: "bad port", args: []string{"--port", "70000"}, wantCode: 2,
			wantStderr: "pinlab-agent: --port 70000: want a port 1-65535\nusage: pinlab-agent"},
		{name: "help", args: []string{"--help"}, wantStdout: "usage: pinlab-agent"},
		{name: "version", args: []string{"--version"}, wantStdout: "pinlab-agent "},
		{name: "two readings", args: []string{"--port", "1", "--count", "2", "--interval", "10ms"}, wantLines: 2},
		{name: "two readings from /proc", args: []string{"--proc", "--count", "2", "--interval", "10ms"}, wantLines: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.wantCode || !strings.HasPrefix(stderr.String(), tc.wantStderr) {
				t.Errorf("run(%q) = %d, stderr %q; want %d, %q", tc.args, code, stderr.String(), tc.wantCode, tc.wantStderr)
			}
			if tc.wantStdout != "" {
				if !strings.HasPrefix(stdout.String(), tc.wantStdout) {
					t.Errorf("run(%q): stdout %q, want %q first", tc.args, stdout.String(), tc.wantStdout)
				}
				return
			}
			n := 0
			for line := range strings.Lines(stdout.String()) {
				var r agent.Reading
				if err := json.Unmarshal([]byte(line), &r); err != nil || r.V != 1 || r.Err != "" {
					t.Errorf("line %q: %v", line, err)
				}
				n++
			}
			if n != tc.wantLines {
				t.Errorf("run(%q): %d lines, want %d:\n%s", tc.args, n, tc.wantLines, stdout.String())
			}
		})
	}
}

// TestVersion: --version names the output format the readings carry.
func TestVersion(t *testing.T) {
	r, err := agent.Read(agent.Options{Ports: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(", output format v%d", r.V); !strings.HasSuffix(versionLine(), want) {
		t.Errorf("version %q, want it to end %q", versionLine(), want)
	}
}

// TestSignal runs the command and stops it as the kubelet does, after its
// first line: it must exit 0.
func TestSignal(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM to send on Windows")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "--interval", "10ms", "--port", "1")
			cmd.Env = append(os.Environ(), mainEnv+"=1")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			first, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatalf("first line: %v (stderr %q)", err, stderr.String())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait() // stdout is closed once the command has exited
			if err != nil || ctx.Err() != nil {
				t.Errorf("after %v: %v (stderr %q; first line %q)", sig, err, stderr.String(), first)
			}
		})
	}
}
