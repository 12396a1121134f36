package coredns

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestVersionMatchesBuildScript reads build.sh: the version and the cache
// key's shape must be what BinDir looks for.
func TestVersionMatchesBuildScript(t *testing.T) {
	b, err := os.ReadFile("../../build/coredns/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	m := regexp.MustCompile(`(?m)^coredns_version=(\S+)$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatal("build.sh sets no coredns_version")
	}
	if m[1] != Version {
		t.Errorf("build.sh: coredns_version=%s, the package says %s", m[1], Version)
	}
	key := `key="coredns-${coredns_version}-$(go env GOOS)-$(go env GOARCH)-${hash}"`
	if !strings.Contains(script, key) {
		t.Errorf("build.sh's cache key is not %s, which buildKeyPrefix copies", key)
	}
	mod, err := os.ReadFile("../../build/coredns/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "github.com/coredns/coredns "+Version+"\n") {
		t.Errorf("build/coredns/go.mod does not require github.com/coredns/coredns %s", Version)
	}
}

// fakeBuild makes root/coredns/KEY/bin with an executable coredns, and
// the .complete marker (mtime at) when complete.
func fakeBuild(t *testing.T, root, hash string, complete bool, at time.Time) string {
	t.Helper()
	dir := filepath.Join(root, "coredns", buildKeyPrefix()+hash, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, binary), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if complete {
		mark := filepath.Join(dir, ".complete")
		if err := os.WriteFile(mark, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(mark, at, at); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBinDir(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, root string) string // returns the directory wanted, "" for ErrNotBuilt
	}{
		{"none", func(t *testing.T, root string) string { return "" }},
		{"incomplete", func(t *testing.T, root string) string {
			fakeBuild(t, root, "aaa", false, now)
			return ""
		}},
		{"newest complete", func(t *testing.T, root string) string {
			fakeBuild(t, root, "old", true, now.Add(-time.Hour))
			fakeBuild(t, root, "half", false, now)
			return fakeBuild(t, root, "new", true, now.Add(-time.Minute))
		}},
		{"other version", func(t *testing.T, root string) string {
			dir := filepath.Join(root, "coredns", "coredns-v1.0.0-"+runtime.GOOS+"-"+runtime.GOARCH+"-x", "bin")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, binary), []byte("#!/bin/sh\n"), 0o755)
			os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644)
			return ""
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			t.Setenv("PINLAB_CACHE", root)
			t.Setenv(BinEnv, "")
			want := tt.setup(t, root)
			got, err := BinDir()
			if want == "" {
				if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), BuildCommand) {
					t.Fatalf("BinDir() = %q, %v; want ErrNotBuilt naming %s", got, err, BuildCommand)
				}
				return
			}
			if err != nil || got != want {
				t.Fatalf("BinDir() = %q, %v; want %q", got, err, want)
			}
		})
	}
}

func TestBinDirEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(BinEnv, dir)
	if _, err := BinDir(); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("BinDir() with an empty %s: %v; want ErrNotBuilt", BinEnv, err)
	}
	if err := os.WriteFile(filepath.Join(dir, binary), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := BinDir(); err != nil || got != dir {
		t.Fatalf("BinDir() = %q, %v; want %q", got, err, dir)
	}
}

// TestCheckDnstap: a binary whose plugin list lacks dnstap (an older
// build) is refused with the rebuild command; one that lists it passes.
func TestCheckDnstap(t *testing.T) {
	for _, tt := range []struct {
		name, plugins, wantErr string
	}{
		{"with dnstap", "bind\ncache\ndnstap\nerrors\n", ""},
		{"without dnstap", "bind\ncache\nerrors\n", "no dnstap plugin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			script := "#!/bin/sh\nprintf '" + strings.ReplaceAll(tt.plugins, "\n", "\\n") + "'\n"
			if err := os.WriteFile(filepath.Join(dir, binary), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			err := CheckDnstap(dir)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), BuildCommand)) {
				t.Errorf("CheckDnstap: %v, want %q", err, tt.wantErr)
			}
		})
	}
}
