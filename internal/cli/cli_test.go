package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
)

func TestLabRunFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    LabRunOptions
		wantErr string
	}{
		{name: "defaults", args: nil, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, ControlPlane: "embedded", Dataplane: "pinlab", PodNetwork: "shared", DiagnoseWindow: evidence.DefaultWindow}},
		{name: "dashboard", args: []string{"--ui", "--ui-addr", "127.0.0.2:7480"}, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UI: true, UIAddr: "127.0.0.2:7480", ControlPlane: "embedded", Dataplane: "pinlab", PodNetwork: "shared", DiagnoseWindow: evidence.DefaultWindow}},
		{name: "dashboard off loopback", args: []string{"--ui", "--ui-addr", "10.0.0.1:80"}, wantErr: `--ui-addr "10.0.0.1:80": expected IP:port inside 127.0.0.0/8`},
		{name: "file and flags", args: []string{"my.yaml", "-o", "json", "--variant", "a,b", "--sequential", "--seed", "7", "--progress", "off", "--log-level", "debug", "--html", "r.html"},
			want: LabRunOptions{File: "my.yaml", Output: "json", Variants: []string{"a", "b"}, Sequential: true, Seed: 7, Progress: "off", LogLevel: "debug", HTML: "r.html", UIAddr: DefaultUIAddr, ControlPlane: "embedded", Dataplane: "pinlab", PodNetwork: "shared", DiagnoseWindow: evidence.DefaultWindow}},
		{name: "diagnose", args: []string{"--diagnose"}, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, Diagnose: true, ControlPlane: "embedded", Dataplane: "pinlab", PodNetwork: "shared", DiagnoseWindow: evidence.DefaultWindow}},
		{name: "diagnose-at implies diagnose", args: []string{"--diagnose-at", "20s", "--diagnose-window", "3s"},
			want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, Diagnose: true, DiagnoseAt: 20 * time.Second, ControlPlane: "embedded", Dataplane: "pinlab", PodNetwork: "shared", DiagnoseWindow: 3 * time.Second}},
		{name: "diagnose-at negative", args: []string{"--diagnose-at", "-1s"}, wantErr: "--diagnose-at -1s: want a time of load"},
		{name: "diagnose-window too short", args: []string{"--diagnose-window", "10ms"}, wantErr: "--diagnose-window 10ms: want 100ms to 10m"},
		{name: "real control plane", args: []string{"--control-plane", "kubernetes"}, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, ControlPlane: "kubernetes", Dataplane: "pinlab", PodNetwork: "shared", DiagnoseWindow: evidence.DefaultWindow}},
		{name: "real kube-proxy", args: []string{"--control-plane", "kubernetes", "--dataplane", "kube-proxy-nftables"}, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, ControlPlane: "kubernetes", Dataplane: "kube-proxy-nftables", PodNetwork: "shared", DiagnoseWindow: evidence.DefaultWindow}},
		{name: "dataplane without a real control plane", args: []string{"--dataplane", "kube-proxy-iptables"}, wantErr: "--dataplane kube-proxy-iptables needs --control-plane kubernetes"},
		{name: "dataplane pinlab named on the embedded control plane", args: []string{"--dataplane", "pinlab"}, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, ControlPlane: "embedded", Dataplane: "pinlab", PodNetwork: "shared", DiagnoseWindow: evidence.DefaultWindow}},
		{name: "real dataplane on the embedded control plane", args: []string{"--dataplane", "kube-proxy-iptables"}, wantErr: "--dataplane kube-proxy-iptables needs --control-plane kubernetes"},
		{name: "unknown dataplane", args: []string{"--control-plane", "kubernetes", "--dataplane", "ipvs"}, wantErr: `--dataplane: dataplane "ipvs": expected pinlab, kube-proxy-nftables, kube-proxy-iptables`},
		{name: "compare dataplanes", args: []string{"--compare-dataplanes"}, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, ControlPlane: "kubernetes", Dataplane: "kube-proxy-nftables", PodNetwork: "shared", CompareDataplanes: true, DiagnoseWindow: evidence.DefaultWindow}},
		{name: "compare with iptables", args: []string{"--compare-dataplanes", "--dataplane", "kube-proxy-iptables"}, want: LabRunOptions{File: "scale-out", Output: "table", Progress: "auto", LogLevel: "off", UIAddr: DefaultUIAddr, ControlPlane: "kubernetes", Dataplane: "kube-proxy-iptables", PodNetwork: "shared", CompareDataplanes: true, DiagnoseWindow: evidence.DefaultWindow}},
		{name: "compare on the embedded control plane", args: []string{"--compare-dataplanes", "--control-plane", "embedded"}, wantErr: "--compare-dataplanes runs on --control-plane kubernetes"},
		{name: "compare pinlab with itself", args: []string{"--compare-dataplanes", "--dataplane", "pinlab"}, wantErr: "name the real dataplane to compare pinlab's with"},
		{name: "compare with an HTML report", args: []string{"--compare-dataplanes", "--html", "r.html"}, wantErr: "the HTML report shows one run"},
		{name: "compare with the dashboard", args: []string{"--compare-dataplanes", "--ui"}, wantErr: "leave out --ui"},
		{name: "unknown control plane", args: []string{"--control-plane", "kind"}, wantErr: `--control-plane "kind": expected embedded or kubernetes`},
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
			got.In, got.Out, got.Err = nil, nil, nil
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
		{name: "missing file", args: []string{"lab", "run", filepath.Join(dir, "none.yaml")}, code: ExitUsage, stderr: "no such file"},
		{name: "yaml does not parse", args: []string{"lab", "run", bad}, code: ExitError, stderr: "bad.yaml:5: document 2"},
		{name: "bad flag", args: []string{"lab", "run", "--nope"}, code: ExitUsage, stderr: "unknown flag"},
		{name: "lab up: no such scenario", args: []string{"lab", "up", "-f", "nosuch"}, code: ExitUsage, stderr: "nosuch: no such file or built-in"},
		{name: "dataplane on the embedded control plane", args: []string{"lab", "run", "--dataplane", "kube-proxy-nftables"}, code: ExitUsage, stderr: "needs --control-plane kubernetes"},
		{name: "lab up: dataplane on the embedded control plane", args: []string{"lab", "up", "--dataplane", "kube-proxy-iptables"}, code: ExitUsage, stderr: "--dataplane kube-proxy-iptables needs --control-plane kubernetes"},
		{name: "unknown variant", args: []string{"lab", "run", "--variant", "nope"}, code: ExitUsage, stderr: `no variant "nope"`},
		{name: "diagnosis after the load", args: []string{"lab", "run", "same-effect", "--diagnose-at", "12s"}, code: ExitUsage,
			stderr: "--diagnose-at 12s plus --diagnose-window 5s ends after the scenario's 15s of load"},
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

func TestParseRefs(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		defaultKind string
		many        bool
		want        []ref
		wantErr     string
	}{
		{name: "kind/name", args: []string{"deployment/pricing"}, want: []ref{{"Deployment", "pricing"}}},
		{name: "short kind", args: []string{"sts/db"}, want: []ref{{"StatefulSet", "db"}}},
		{name: "kind and name", args: []string{"pod", "db-0"}, want: []ref{{"Pod", "db-0"}}},
		{name: "kind case", args: []string{"Pods/db-0"}, want: []ref{{"Pod", "db-0"}}},
		{name: "bare name without default", args: []string{"pricing"}, wantErr: `"pricing": expected KIND/NAME such as deployment/pricing`},
		{name: "bare name is a pod", args: []string{"db-0"}, defaultKind: "Pod", want: []ref{{"Pod", "db-0"}}},
		{name: "bare names", args: []string{"db-0", "db-1"}, defaultKind: "Pod", many: true, want: []ref{{"Pod", "db-0"}, {"Pod", "db-1"}}},
		{name: "unknown kind", args: []string{"ingress/x"}, wantErr: `unknown kind "ingress"`},
		{name: "empty name", args: []string{"statefulset/"}, wantErr: `"statefulset/": missing the name after the slash: expected statefulset/NAME`},
		{name: "empty kind", args: []string{"/db"}, wantErr: "missing the kind before the slash"},
		{name: "kind without name", args: []string{"pod"}, defaultKind: "Pod", wantErr: `"pod": missing the name`},
		{name: "two refs where one is allowed", args: []string{"pod/a", "pod/b"}, defaultKind: "Pod", wantErr: "expected one KIND/NAME, got 2: pod/a pod/b"},
		{name: "two refs", args: []string{"pod/a", "pod/b"}, defaultKind: "Pod", many: true, want: []ref{{"Pod", "a"}, {"Pod", "b"}}},
		{name: "kind and two names", args: []string{"pod", "a", "b"}, many: true, want: []ref{{"Pod", "a"}, {"Pod", "b"}}},
		{name: "mixed forms", args: []string{"pod", "pod/a"}, many: true, wantErr: "not both"},
		{name: "no arguments", args: nil, wantErr: "expected KIND/NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRefs(tt.args, tt.defaultKind, tt.many)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !exit.IsUsage(err) {
					t.Fatalf("parseRefs(%q) = %v, %v; want a usage error containing %q", tt.args, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(ref{})); diff != "" {
				t.Errorf("parseRefs(%q) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

// TestArgumentErrors: mistakes in arguments are usage errors (exit 2)
// that say what to type instead; none of these reach a lab.
func TestArgumentErrors(t *testing.T) {
	closed := freeAddr(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{name: "scale with an empty name", args: []string{"lab", "scale", "statefulset/", "--replicas", "2"}, code: ExitUsage, stderr: "missing the name after the slash"},
		{name: "report to an HTML file with no name", args: []string{"report", "result.json", "--html", ""}, code: ExitUsage, stderr: "--html: an empty file name"},
		{name: "scale below 0", args: []string{"lab", "scale", "deploy/pricing", "--replicas", "-1"}, code: ExitUsage, stderr: "--replicas -1: expected 0 to 1000"},
		{name: "scale above what a lab runs", args: []string{"lab", "scale", "deploy/pricing", "--replicas", "1001"}, code: ExitUsage, stderr: "--replicas 1001: expected 0 to 1000"},
		{name: "unready takes one pod", args: []string{"lab", "unready", "pod/a", "pod/b"}, code: ExitUsage, stderr: "expected one KIND/NAME, got 2"},
		{name: "delete of a deployment", args: []string{"lab", "delete", "deploy/pricing"}, code: ExitUsage, stderr: "only pods can be deleted"},
		{name: "delete of a bare pod name reaches the lab", args: []string{"lab", "delete", "db-0", "--control", closed}, code: ExitError, stderr: "no lab answers"},
		{name: "delete of two pods reaches the lab", args: []string{"lab", "delete", "pod/a", "pod/b", "--control", closed}, code: ExitError, stderr: "no lab answers"},
		{name: "up with a name but no -f", args: []string{"lab", "up", "dns-demo"}, code: ExitUsage, stderr: "use: pinlab lab up -f dns-demo"},
		{name: "get without kinds", args: []string{"lab", "get"}, code: ExitUsage, stderr: "lab get needs the kinds to list"},
		{name: "get with two arguments", args: []string{"lab", "get", "pods", "db-0"}, code: ExitUsage, stderr: "one comma-separated list of kinds"},
		{name: "unknown lab command", args: []string{"lab", "bogus"}, code: ExitUsage, stderr: `unknown command "bogus" for "pinlab lab"`},
		{name: "unknown lab command close to one", args: []string{"lab", "gte"}, code: ExitUsage, stderr: `did you mean "get"?`},
		{name: "unknown top command", args: []string{"bogus"}, code: ExitUsage, stderr: `unknown command "bogus" for "pinlab"`},
		{name: "lab alone prints help", args: []string{"lab"}, code: ExitOK},
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

// TestHelpNamesExitCodes: pinlab --help says what every exit code means.
func TestHelpNamesExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"--help"}, &out, &errb); code != ExitOK {
		t.Fatalf("--help: exit %d, %s", code, errb.String())
	}
	for _, c := range exit.Codes {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^  %d +\S`, c)).MatchString(out.String()) {
			t.Errorf("pinlab --help names no exit code %d:\n%s", c, out.String())
		}
	}
}
