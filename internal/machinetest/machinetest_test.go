package machinetest_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/machinetest"
)

// child, set in a re-executed test binary, makes it hold the lock, print
// "held", and then release it ("release") or keep it for a minute ("keep").
const child = "PINLAB_MACHINETEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(child) {
	case "release":
		release := machinetest.Hold()
		os.Stdout.WriteString("held\n")
		release()
		os.Exit(0)
	case "keep":
		machinetest.Hold()
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	// A holder around this test binary must not turn its Hold into a
	// no-op: the tests hold and wait in their own TMPDIR.
	os.Unsetenv(machinetest.HeldEnv)
	os.Exit(m.Run())
}

// start re-executes the test binary as a child in mode, without
// machinetest.HeldEnv unless inherit.
func start(t *testing.T, mode string, inherit bool) (*exec.Cmd, *buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		if inherit || !strings.HasPrefix(kv, machinetest.HeldEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, child+"="+mode)
	out := &buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, out
}

// within waits up to d for cond (labtest.Poll every 50 ms).
func within(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return labtest.Poll(ctx, 50*time.Millisecond, cond) == nil
}

// TestHoldExcludes: a second process waits, saying so, while the first
// holds the lock, and takes it once released.
func TestHoldExcludes(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	release := machinetest.Hold()
	cmd, out := start(t, "release", false)
	if !within(10*time.Second, func() bool { return strings.Contains(out.String(), "waiting for another") }) {
		release()
		t.Fatalf("the child did not say it waits: %q", out.String())
	}
	if strings.Contains(out.String(), "held") {
		release()
		t.Fatalf("the child took the lock this process holds: %q", out.String())
	}
	release()
	if !within(30*time.Second, func() bool { return strings.Contains(out.String(), "held\n") }) {
		t.Fatalf("the child did not take the lock within 30 s of its release: %q", out.String())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v: %q", err, out.String())
	}
}

// TestHoldAfterKill: a holder killed with SIGKILL leaves the lock free.
func TestHoldAfterKill(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	cmd, out := start(t, "keep", false)
	if !within(30*time.Second, func() bool { return strings.Contains(out.String(), "held\n") }) {
		t.Fatalf("the child did not take the lock: %q", out.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	got := make(chan func(), 1)
	go func() { got <- machinetest.Hold() }()
	select {
	case release := <-got:
		release()
	case <-time.After(30 * time.Second):
		t.Fatal("the lock stayed held after its holder was killed")
	}
}

// buffer is a bytes.Buffer safe for a child's writes beside the test's reads.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestHoldInChild: a child of the holder (it inherits HeldEnv) does not
// wait for the lock its parent holds.
func TestHoldInChild(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	release := machinetest.Hold()
	defer release()
	if os.Getenv(machinetest.HeldEnv) == "" {
		t.Fatalf("%s not set while holding", machinetest.HeldEnv)
	}
	cmd, out := start(t, "release", true)
	if !within(10*time.Second, func() bool { return strings.Contains(out.String(), "held\n") }) {
		t.Fatalf("the holder's child waited for its parent's lock: %q", out.String())
	}
	cmd.Wait()
	if strings.Contains(out.String(), "waiting") {
		t.Errorf("the holder's child said it waits: %q", out.String())
	}
}

// TestHoldIgnoresAStrayValue: HeldEnv naming no ancestor (no running
// process at all) does not skip the lock: the child waits for this one.
func TestHoldIgnoresAStrayValue(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	release := machinetest.Hold()
	t.Setenv(machinetest.HeldEnv, "999999999")
	cmd, out := start(t, "release", true)
	waited := within(10*time.Second, func() bool { return strings.Contains(out.String(), "waiting for another") })
	release()
	cmd.Wait()
	if !waited {
		t.Fatalf("a child with a stray %s did not wait for the lock: %q", machinetest.HeldEnv, out.String())
	}
}
