package controlplane

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRemoveState: with keepLogs, only the components' logs are left, at
// any depth, and no directory they are not in; without logs, nothing.
func TestRemoveState(t *testing.T) {
	tests := []struct {
		name     string
		files    []string // under the state directory
		keepLogs bool
		want     []string // files and empty directories left
	}{
		{name: "everything goes", files: []string{"etcd.log", "tokens.csv", "certs/sa.key"}, want: nil},
		{name: "logs kept", files: []string{"etcd.log", "tokens.csv", "certs/sa.key", "coredns/coredns.log", "coredns/Corefile", "etcd/member/wal"}, keepLogs: true,
			want: []string{"coredns/coredns.log", "etcd.log"}},
		{name: "no log to keep", files: []string{"tokens.csv", "certs/sa.key"}, keepLogs: true, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			for _, f := range tt.files {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := RemoveState(dir, tt.keepLogs); err != nil {
				t.Fatal(err)
			}
			var left []string // files and empty directories
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || p == dir {
					return nil
				}
				rel, _ := filepath.Rel(dir, p)
				if ents, _ := os.ReadDir(p); !d.IsDir() || len(ents) == 0 {
					left = append(left, rel)
				}
				return nil
			})
			if diff := cmp.Diff(tt.want, left); diff != "" {
				t.Errorf("left (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(dir); (err == nil) != (len(tt.want) > 0) {
				t.Errorf("state directory exists: %v; want it only with logs left", err == nil)
			}
		})
	}
}
