package control

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWriteToken: the token file is its owner's only (0600 in a 0700
// directory) and reads back; a stale token file is replaced; anything else
// at the path, a symlink included, is refused and left as it was, as is a
// directory other users may write to.
func TestWriteToken(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, dir, path string) // dir exists, mode 0700
		wantErr string
	}{
		{name: "new file"},
		{name: "stale token replaced", prepare: func(t *testing.T, _, path string) { write(t, path, NewToken()+"\n", 0o600) }},
		{name: "another file refused", prepare: func(t *testing.T, _, path string) { write(t, path, "precious", 0o644) },
			wantErr: "exists and is not a token file of yours"},
		{name: "symlink refused", prepare: func(t *testing.T, _, path string) {
			victim := filepath.Join(t.TempDir(), "victim")
			write(t, victim, NewToken(), 0o600)
			if err := os.Symlink(victim, path); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "not a pinlab token file (it is a L"},
		{name: "FIFO refused", prepare: func(t *testing.T, _, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "not a pinlab token file (it is a p"},
		{name: "directory others may write refused", prepare: func(t *testing.T, dir, _ string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "has mode 0777: other users could swap the token file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pinlab")
			path := filepath.Join(dir, "token")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.prepare != nil {
				tt.prepare(t, dir, path)
			}
			before, _ := os.Lstat(path)
			token := NewToken()
			err := WriteToken(path, token, false)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("WriteToken: %v, want an error containing %q", err, tt.wantErr)
				}
				if after, _ := os.Lstat(path); before != nil && (after == nil || !os.SameFile(before, after)) {
					t.Errorf("what was at the path was replaced")
				}
				return
			}
			if err != nil {
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
			if got, err := ReadToken(path); got != token || err != nil {
				t.Errorf("ReadToken = %q, %v; want %q", got, err, token)
			}
		})
	}
}

// TestWriteTokenDirs: with mkdir, missing directories are created 0700;
// without, a missing directory is an error (a path given is not created).
func TestWriteTokenDirs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := WriteToken(filepath.Join(dir, "token"), NewToken(), false); err == nil {
		t.Errorf("WriteToken without mkdir created %s", dir)
	}
	if err := WriteToken(filepath.Join(dir, "token"), NewToken(), true); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want mode 0700", d, fi.Mode(), err)
		}
	}
}

// TestReadToken: only a small regular file of the user's holding one
// token is read; a FIFO, a device, a large or malformed file is an error
// at once (issue 15's tester: /dev/zero as the token file grew to 20 GB
// and a FIFO hung every lab command past SIGTERM).
func TestReadToken(t *testing.T) {
	token := NewToken()
	tests := []struct {
		name    string
		path    func(t *testing.T) string
		wantErr string
	}{
		{name: "token", path: func(t *testing.T) string { return tempFile(t, token+"\n") }},
		{name: "symlink to a token", path: func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(tempFile(t, token), link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
		{name: "empty", path: func(t *testing.T) string { return tempFile(t, "\n") }, wantErr: "the token file is empty"},
		{name: "two lines", path: func(t *testing.T) string { return tempFile(t, token+"\n"+token+"\n") }, wantErr: "not a pinlab token file (want one line"},
		{name: "NUL bytes", path: func(t *testing.T) string { return tempFile(t, strings.Repeat("\x00", 100)) }, wantErr: "not a pinlab token file (want one line"},
		{name: "short", path: func(t *testing.T) string { return tempFile(t, "abc") }, wantErr: "not a pinlab token file (want one line"},
		{name: "large", path: func(t *testing.T) string { return tempFile(t, strings.Repeat("a", 1<<20)) }, wantErr: "more than 1024 bytes"},
		{name: "device", path: func(*testing.T) string { return "/dev/zero" }, wantErr: "not a pinlab token file (it is a D"},
		{name: "FIFO", path: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fifo")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, wantErr: "not a pinlab token file (it is a p"},
		{name: "missing", path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadToken(tt.path(t))
			if tt.wantErr == "" {
				if got != token || err != nil {
					t.Fatalf("ReadToken = %q, %v; want the token", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ReadToken = %q, %v; want an error containing %q", got, err, tt.wantErr)
			}
		})
	}
}

// TestReadTokenOfAnotherUser: a token file another user owns is refused
// (they could have planted it). Needs root to give the file away.
func TestReadTokenOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to chown a file to another user")
	}
	p := tempFile(t, NewToken())
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToken(p); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534, not to you") {
		t.Fatalf("ReadToken: %v, want an error naming the owner", err)
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func tempFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "token")
	write(t, p, content, 0o600)
	return p
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
