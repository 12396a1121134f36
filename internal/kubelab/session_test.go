package kubelab

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSweep: a session whose owner runs is left alone; one whose owner is
// gone loses its keys and tokens at once and its logs after staleLogs.
func TestSweep(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	me, err := startTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	session := func(name, owner string, files ...string) string {
		dir := filepath.Join(tmp, sessionPrefix+name)
		for _, f := range append(files, ownerFile) {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			data := "x"
			if f == ownerFile {
				data = owner
			}
			if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	ours := session("ours", fmt.Sprintf("%d %d\n", os.Getpid(), me), "cp/tokens.csv", "cp/etcd.log")
	reused := session("reused", fmt.Sprintf("%d %d\n", os.Getpid(), me+1), "cp/tokens.csv", "cp/etcd.log") // our pid, another process
	gone := session("gone", "999999999 1\n", "cp/tokens.csv", "cp/sa.key", "cp/etcd.log")
	old := session("old", "999999999 1\n", "cp/etcd.log")
	long := time.Now().Add(-2 * staleLogs)
	filepath.Walk(old, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, long, long) })

	sweep()

	for _, tt := range []struct {
		path string
		want bool
	}{
		{filepath.Join(ours, "cp/tokens.csv"), true},
		{filepath.Join(ours, ownerFile), true},
		{filepath.Join(reused, "cp/tokens.csv"), false},
		{filepath.Join(reused, "cp/etcd.log"), true},
		{filepath.Join(gone, "cp/tokens.csv"), false},
		{filepath.Join(gone, "cp/sa.key"), false},
		{filepath.Join(gone, "cp/etcd.log"), true},
		{old, false},
	} {
		if got := exists(tt.path); got != tt.want {
			t.Errorf("%s exists after the sweep: %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestStartTime(t *testing.T) {
	a, err := startTime(os.Getpid())
	if err != nil || a <= 0 {
		t.Fatalf("startTime(self) = %d, %v", a, err)
	}
	if b, _ := startTime(os.Getpid()); b != a {
		t.Errorf("startTime(self) changed: %d then %d", a, b)
	}
	if _, err := startTime(999999999); err == nil {
		t.Error("startTime of no process: no error")
	}
}
