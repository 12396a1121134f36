package scenario_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/manifest"
	"github.com/pinlab/pinlab/internal/scenario"
	"golang.org/x/sys/unix"
)

// waitLimit bounds every wait of these tests; reads end by events, not by
// it.
const waitLimit = 10 * time.Second

func fifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return path
}

type readResult struct {
	data []byte
	err  error
}

// readAsync runs ReadFile in a goroutine; the test receives its result
// with receive.
func readAsync(ctx context.Context, path string) <-chan readResult {
	done := make(chan readResult, 1)
	go func() {
		data, err := scenario.ReadFile(ctx, path)
		done <- readResult{data, err}
	}()
	return done
}

func receive(t *testing.T, done <-chan readResult) readResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(waitLimit):
		t.Fatalf("ReadFile still blocked after %v", waitLimit)
		return readResult{}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(small, []byte("kind: Namespace\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Issue 15: a 50 MB file is refused by its size, before it is read
	// (this one is sparse: reading it would take 50 MB).
	big := filepath.Join(dir, "big.yaml")
	if f, err := os.Create(big); err != nil {
		t.Fatal(err)
	} else if err := f.Truncate(50 << 20); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	tests := []struct {
		name    string
		path    string
		want    string
		wantErr error
	}{
		{name: "regular file", path: small, want: "kind: Namespace\n"},
		{name: "50 MB file", path: big, wantErr: scenario.ErrTooLarge},
		{name: "/dev/zero", path: "/dev/zero", wantErr: scenario.ErrTooLarge}, // ran out of memory at 3.7 GB
		{name: "directory", path: dir, wantErr: errors.New("is a directory")},
		{name: "missing", path: filepath.Join(dir, "none"), wantErr: os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := scenario.ReadFile(context.Background(), tt.path)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatal(err)
			case tt.wantErr != nil && (err == nil || !errors.Is(err, tt.wantErr) && !strings.Contains(err.Error(), tt.wantErr.Error())):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			case string(got) != tt.want:
				t.Errorf("read %d bytes, want %q", len(got), tt.want)
			}
		})
	}
}

// TestReadFileFIFO: a FIFO is read when its writer is done, and a FIFO
// that never gets a writer, or never ends, gives way to the context
// (issue 15: it blocked forever, ignoring SIGINT).
func TestReadFileFIFO(t *testing.T) {
	t.Run("writer writes and closes", func(t *testing.T) {
		path := fifo(t)
		done := readAsync(context.Background(), path)
		w, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until the reader is there
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "kind: Namespace\n")
		w.Close()
		if r := receive(t, done); r.err != nil || string(r.data) != "kind: Namespace\n" {
			t.Errorf("ReadFile = %q, %v", r.data, r.err)
		}
	})
	t.Run("no writer ever", func(t *testing.T) {
		path := fifo(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := readAsync(ctx, path)
		cancel()
		if r := receive(t, done); !errors.Is(r.err, context.Canceled) {
			t.Errorf("ReadFile = %v, want the context's end", r.err)
		}
	})
	t.Run("writer never closes", func(t *testing.T) {
		path := fifo(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := readAsync(ctx, path)
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		io.WriteString(w, "kind: Namespace\n")
		// Once the reader has taken what was written, it waits for more.
		labtest.WaitFor(t, waitLimit, "the reader to drain the FIFO", func() bool {
			n, err := unix.IoctlGetInt(int(w.Fd()), unix.TIOCINQ) // FIONREAD: bytes still in the pipe
			return err == nil && n == 0
		})
		cancel()
		if r := receive(t, done); !errors.Is(r.err, context.Canceled) {
			t.Errorf("ReadFile = %v, want the context's end", r.err)
		}
	})
}

func TestReadAll(t *testing.T) {
	t.Run("larger than the cap", func(t *testing.T) {
		_, err := scenario.ReadAll(context.Background(), "stdin", io.LimitReader(zeros{}, scenario.MaxFileSize+10))
		if !errors.Is(err, scenario.ErrTooLarge) {
			t.Errorf("error %v, want ErrTooLarge", err)
		}
	})
	t.Run("a reader that blocks", func(t *testing.T) {
		r, w := io.Pipe()
		defer w.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := scenario.ReadAll(ctx, "stdin", r); !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want the context's end", err)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestLoadLimits: too many objects or values are refused at the document
// that passed the limit, with a message saying why, and without growing
// with the input (issue 15: 200,000 Namespaces took 1.1 GB and never
// started).
func TestLoadLimits(t *testing.T) {
	ns := "apiVersion: v1\nkind: Namespace\nmetadata: {name: a%d}\n---\n"
	many := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(strings.Replace(ns, "%d", string(rune('a'+i%26))+itoa(i), 1))
		}
		return b.String()
	}
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{name: "1001 objects", yaml: many(1001), want: []string{"f.yaml:4001: document 1001", "more than 1000 objects; a lab runs at most 1000"}},
		{name: "as many documents as fit in the size cap", yaml: many(scenario.MaxFileSize / (len(ns) + 6)), want: []string{"document 1001", "more than 1000 objects"}},
		{name: "too many values", yaml: "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\nspec: {x: [" + strings.Repeat("1,", scenario.MaxValues) + "1]}\n",
			want: []string{"f.yaml:1: document 1", "too many YAML values: more than 200000"}},
		{name: "larger than the size cap", yaml: strings.Repeat("#\n", scenario.MaxFileSize/2+1), want: []string{"f.yaml: file too large"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := scenario.LoadObjects("f.yaml", []byte(tt.yaml))
			runtime.ReadMemStats(&after)
			var me *manifest.Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T), want a *manifest.Error", err, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 400<<20 {
				t.Errorf("allocated %d MB to refuse it", alloc>>20)
			}
		})
	}
	if _, err := scenario.LoadObjects("f.yaml", []byte(many(1000))); err != nil {
		t.Errorf("1000 objects: %v", err)
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
