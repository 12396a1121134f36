package controlplane

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// scriptBin makes a bin directory of shell scripts: scripts[name] is the
// body of that command (after a line that records its pid in DIR/name.pid);
// commands without one sleep.
func scriptBin(t *testing.T, scripts map[string]string) (bin string, pidFiles string) {
	t.Helper()
	bin, pidFiles = t.TempDir(), t.TempDir()
	for _, c := range Commands {
		body, ok := scripts[c]
		if !ok {
			body = "exec sleep 60"
		}
		s := "#!/bin/sh\necho $$ > " + filepath.Join(pidFiles, c+".pid") + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, c), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin, pidFiles
}

// checkGone fails t if a process whose pid a fake command recorded still
// exists.
func checkGone(t *testing.T, pidFiles string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(pidFiles, "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid := strings.TrimSpace(string(b))
		if pid == "" {
			// Killed between the shell's open of the file and its write:
			// "/proc/" would be taken for a live process (CI, once).
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			t.Errorf("%s (pid %s) still exists after Start failed", filepath.Base(f), pid)
		}
	}
}

func TestStartFailureSaysWhy(t *testing.T) {
	tests := []struct {
		name    string
		scripts map[string]string
		timeout time.Duration
		want    []string
	}{
		{
			name:    "etcd exits",
			scripts: map[string]string{"etcd": "echo 'etcd: listen tcp: address already in use' >&2; exit 1"},
			want: []string{
				"controlplane: etcd exited (exit status 1) before kube-apiserver's /readyz answered ok",
				"--unsafe-no-fsync", "listens on: http://127.0.0.1:", "etcd: listen tcp: address already in use",
			},
		},
		{
			name: "kube-apiserver exits",
			scripts: map[string]string{"kube-apiserver": "i=0; while [ $i -lt 30 ]; do echo line $i; i=$((i+1)); done; " +
				"echo 'Error: unknown flag: --bogus' >&2; exit 1"},
			want: []string{
				"kube-apiserver exited (exit status 1)", "--endpoint-reconciler-type=none", "listens on: https://127.0.0.1:",
				"line 29", "Error: unknown flag: --bogus",
			},
		},
		{
			name:    "kube-apiserver never ready",
			timeout: 300 * time.Millisecond,
			want:    []string{"kube-apiserver was not ready (context deadline exceeded); its last /readyz answer: no answer yet"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, pids := scriptBin(t, tt.scripts)
			dir := filepath.Join(t.TempDir(), "state")
			cp, err := Start(context.Background(), Config{BinDir: bin, Dir: dir, ReadyTimeout: tt.timeout})
			if err == nil {
				cp.Close()
				t.Fatal("Start succeeded with failing components")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start error does not say %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "line 9\n") {
				t.Errorf("Start error quotes more than the last %d log lines:\n%v", logTailLines, err)
			}
			checkGone(t, pids)
			if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("state dir: %v, %v; want it kept, mode 0700", st, err)
			}
		})
	}
}

func TestStartRefusesLoopbackAdvertiseAddress(t *testing.T) {
	bin, _ := scriptBin(t, nil)
	_, err := Start(context.Background(), Config{BinDir: bin, Dir: t.TempDir(), AdvertiseAddress: netip.MustParseAddr("127.0.0.1")})
	if err == nil || !strings.Contains(err.Error(), "refuses a loopback") {
		t.Fatalf("Start with advertise address 127.0.0.1 = %v, want a refusal", err)
	}
}

func TestWriteKubeconfig(t *testing.T) {
	cp := &ControlPlane{host: "https://127.0.0.1:6443", token: "t0k", ca: []byte("CA")}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{"", "https://127.0.0.1:40123"} {
		if err := cp.WriteKubeconfig(path, server); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("kubeconfig mode %v, %v; want 0600", st.Mode(), err)
		}
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		want := server
		if want == "" {
			want = cp.host
		}
		if rc.Host != want || rc.BearerToken != "t0k" || string(rc.CAData) != "CA" || rc.ServerName != tlsServerName {
			t.Errorf("kubeconfig loads as host %s, token %q, CA %q, server name %q", rc.Host, rc.BearerToken, rc.CAData, rc.ServerName)
		}
	}
}

// mustAddr parses s as an IP address or fails t.
func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
