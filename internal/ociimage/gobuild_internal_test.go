package ociimage

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestSweepStale: the temporary directories of builds whose process is
// gone are removed; a live process's, and other names, stay.
func TestSweepStale(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	names := []string{
		fmt.Sprintf("%s%d-123", tempPrefix, gone.Process.Pid),
		fmt.Sprintf("%s%d-456", tempPrefix, os.Getpid()),
		tempPrefix + "x-789",
		"go-build123",
	}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(tmp, n, "work"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweepStale(tmp)
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := names[1:]; !slices.Equal(slices.Sorted(slices.Values(left)), slices.Sorted(slices.Values(want))) {
		t.Errorf("left %v, want %v", left, want)
	}
}
