package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/control"

	"github.com/pinlab/pinlab/internal/labtest"
)

// TestLabUpStdoutClosed: `pinlab lab up | head -1` closes lab up's
// standard output while it runs; a write there must not kill it by
// SIGPIPE (which left its token file behind): it goes on serving, and
// Ctrl-C still stops it cleanly, exit 0, token file removed. Its standard
// output is a pipe whose reader is closed before it starts, so its first
// write fails.
func TestLabUpStdoutClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pinlab")
	}
	pinlab := buildPinlab(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	ctl, tokenFile := freeAddr(t), filepath.Join(t.TempDir(), "token")
	up := exec.Command(pinlab, "lab", "up", "--control", ctl, "--token-file", tokenFile)
	up.Stdout = w
	var stderr labtest.Buffer
	up.Stderr = &stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- up.Wait() }()
	defer func() {
		if up.ProcessState == nil {
			up.Process.Kill()
			<-exited
		}
	}()
	// Up once its control API answers; it prints "lab is up" right after.
	client := &control.Client{Addr: ctl, TokenFile: tokenFile}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Info(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("lab up with its output closed ended before it was up: %v\nstderr:\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("lab up not up in 2 min: %v\nstderr:\n%s", err, stderr.String())
		}
	}
	// Still serving after its writes failed.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.Info(ctx); err != nil {
		t.Fatalf("lab up stopped answering after its output closed: %v\nstderr:\n%s", err, stderr.String())
	}
	up.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("lab up after Ctrl-C: %v (want exit 0)\nstderr:\n%s", err, stderr.String())
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("lab up still running a minute after Ctrl-C\nstderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopping") {
		t.Errorf("stderr lacks %q:\n%s", "stopping", stderr.String())
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("token file %s after Ctrl-C: %v; want it removed", tokenFile, err)
	}
}
