package control

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteToken: the token file is its owner's only (0600 in a 0700
// directory), replaces what was at the path without writing through a
// symlink, and reads back.
func TestWriteToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pinlab")
	path := filepath.Join(dir, "token")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	token := NewToken()
	if err := WriteToken(path, token); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{dir, os.ModeDir | 0o700}, {path, 0o600}} {
		fi, err := os.Lstat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, fi.Mode(), f.mode)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if got, err := ReadToken(path); got != token || err != nil {
		t.Errorf("ReadToken = %q, %v; want %q", got, err, token)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToken(path); err == nil {
		t.Error("ReadToken of an empty file succeeded")
	}
}

// TestWriteTokenCreatesPrivateDirs: missing directories are created 0700.
func TestWriteTokenCreatesPrivateDirs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := WriteToken(filepath.Join(dir, "token"), NewToken()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want mode 0700", d, fi.Mode(), err)
		}
	}
}

func TestTokenPath(t *testing.T) {
	tests := []struct {
		name, runtime, config, want string
	}{
		{name: "runtime dir", runtime: "/run/user/1000", config: "/home/u/.config", want: "/run/user/1000/pinlab/control-127.0.0.1-7471.token"},
		{name: "no runtime dir", config: "/home/u/.config", want: "/home/u/.config/pinlab/control-127.0.0.1-7471.token"},
		{name: "relative runtime dir is ignored", runtime: "run", config: "/home/u/.config", want: "/home/u/.config/pinlab/control-127.0.0.1-7471.token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", tt.runtime)
			t.Setenv("XDG_CONFIG_HOME", tt.config)
			got, err := TokenPath("127.0.0.1:7471")
			if got != tt.want || err != nil {
				t.Errorf("TokenPath = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	a, b := NewToken(), NewToken()
	if len(a) != 43 || a == b {
		t.Errorf("NewToken = %q, %q; want two different 43-character tokens", a, b)
	}
}
