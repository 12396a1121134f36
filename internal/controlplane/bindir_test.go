package controlplane

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestVersionsMatchBuildScript reads build.sh: the versions, the cache
// key's shape and the commands it builds must be what BinDir looks for.
func TestVersionsMatchBuildScript(t *testing.T) {
	b, err := os.ReadFile("../../build/controlplane/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	for _, tt := range []struct{ variable, want string }{
		{"k8s_version", KubernetesVersion},
		{"etcd_version", EtcdVersion},
	} {
		m := regexp.MustCompile(`(?m)^` + tt.variable + `=(\S+)$`).FindStringSubmatch(script)
		if m == nil {
			t.Fatalf("build.sh sets no %s", tt.variable)
		}
		if m[1] != tt.want {
			t.Errorf("build.sh: %s=%s, the package says %s", tt.variable, m[1], tt.want)
		}
	}
	key := `key="k8s-${k8s_version}-etcd-${etcd_version}-$(go env GOOS)-$(go env GOARCH)-${hash}"`
	if !strings.Contains(script, key) {
		t.Errorf("build.sh's cache key is not %s, which buildKeyPrefix copies", key)
	}
	m := regexp.MustCompile(`(?m)^cmds=\(([^)]*)\)$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatal("build.sh has no cmds=(...) line")
	}
	if diff := cmp.Diff(Commands, strings.Fields(m[1])); diff != "" {
		t.Errorf("commands (-package +build.sh):\n%s", diff)
	}
}

// fakeBin makes dir a bin directory: every command a script, and the
// .complete marker when complete, with mtime at.
func fakeBin(t *testing.T, dir string, complete bool, at time.Time) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range Commands {
		if err := os.WriteFile(filepath.Join(dir, c), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if complete {
		marker := filepath.Join(dir, ".complete")
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(marker, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBinDir(t *testing.T) {
	prefix := "k8s-" + KubernetesVersion + "-etcd-" + EtcdVersion + "-" + runtime.GOOS + "-" + runtime.GOARCH + "-"
	old, recent := time.Now().Add(-time.Hour), time.Now()
	tests := []struct {
		name    string
		setup   func(t *testing.T, root string) // root is $PINLAB_CACHE
		env     func(root string) string        // $PINLAB_CONTROL_PLANE_BIN
		want    string                          // relative to root
		wantErr string
	}{
		{
			name: "newest complete build",
			setup: func(t *testing.T, root string) {
				fakeBin(t, filepath.Join(root, "controlplane", prefix+"aaaa", "bin"), true, old)
				fakeBin(t, filepath.Join(root, "controlplane", prefix+"bbbb", "bin"), true, recent)
				fakeBin(t, filepath.Join(root, "controlplane", prefix+"cccc", "bin"), false, recent)
			},
			want: "controlplane/" + prefix + "bbbb/bin",
		},
		{
			name: "other versions do not count",
			setup: func(t *testing.T, root string) {
				fakeBin(t, filepath.Join(root, "controlplane", "k8s-v1.36.0-etcd-"+EtcdVersion+"-"+runtime.GOOS+"-"+runtime.GOARCH+"-aaaa", "bin"), true, recent)
			},
			wantErr: "run build/controlplane/build.sh (cold: about 15-17 min and up to 3 GB of memory on 2 cores",
		},
		{
			name:    "nothing built",
			setup:   func(*testing.T, string) {},
			wantErr: "the control plane binaries are not built",
		},
		{
			name:  "environment override",
			setup: func(t *testing.T, root string) { fakeBin(t, filepath.Join(root, "mine"), false, recent) },
			env:   func(root string) string { return filepath.Join(root, "mine") },
			want:  "mine",
		},
		{
			name:    "environment override lacking commands",
			setup:   func(t *testing.T, root string) { os.MkdirAll(filepath.Join(root, "mine"), 0o755) },
			env:     func(root string) string { return filepath.Join(root, "mine") },
			wantErr: "lacks [etcd kube-apiserver",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			t.Setenv("PINLAB_CACHE", root)
			t.Setenv(BinEnv, "")
			if tt.env != nil {
				t.Setenv(BinEnv, tt.env(root))
			}
			tt.setup(t, root)
			got, err := BinDir()
			if tt.wantErr != "" {
				if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("BinDir() = %q, %v; want ErrNotBuilt saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tt.want); got != want {
				t.Errorf("BinDir() = %s, want %s", got, want)
			}
		})
	}
}

func TestCacheRoot(t *testing.T) {
	t.Setenv("PINLAB_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/x")
	if got, _ := CacheRoot(); got != "/x/pinlab" {
		t.Errorf("CacheRoot() = %s with XDG_CACHE_HOME=/x, want /x/pinlab", got)
	}
	t.Setenv("PINLAB_CACHE", "/p")
	if got, _ := CacheRoot(); got != "/p" {
		t.Errorf("CacheRoot() = %s with PINLAB_CACHE=/p, want /p", got)
	}
}
