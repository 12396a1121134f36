package kubelab

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
)

// TestStartUpTakesInsideAddressFirst: StartUp claims the host listener's
// address inside the namespace before anything else, so that no
// component of the control plane can take that port first. Run outside a
// namespace, the address is the listener's own and so already taken:
// StartUp must fail at once on it, having started nothing and written
// nothing.
func TestStartUpTakesInsideAddressFirst(t *testing.T) {
	ln, err := loopback.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var progress labtest.Buffer
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := StartUp(ctx, UpConfig{Listener: ln, Kubeconfig: kubeconfig, Progress: &progress})
	if err == nil {
		u.Close()
		t.Fatal("StartUp on an address taken inside the namespace: no error")
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "the API server's address inside the namespace") {
		t.Errorf("StartUp: %v, want the inside address in use", err)
	}
	if progress.String() != "" {
		t.Errorf("StartUp started something before it claimed the inside address:\n%s", progress.String())
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("StartUp left %v", ents)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the host listener after a failed StartUp: Accept = %v, want it closed (StartUp owns it)", err)
	}
}
