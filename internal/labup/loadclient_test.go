package labup

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/kubelet"
	"k8s.io/client-go/rest"
)

// TestXDSServerNoFiles: the lab's node runs the image's xDS control plane
// in its own process, as the lab's user: --bootstrap, which would write
// and then remove a file of the host's, is refused (exit 2) and no file
// appears.
func TestXDSServerNoFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	var out, errs bytes.Buffer
	listen := func(context.Context, string) (net.Listener, error) {
		t.Error("listened: the command should have stopped at its args")
		return nil, os.ErrInvalid
	}
	code := XDSServer(t.Context(), kubelet.XDSContainer{Args: []string{"xds", "serve", "--bootstrap", path},
		REST: &rest.Config{Host: "https://127.0.0.1:1"}, Listen: listen, Stdout: &out, Stderr: &errs})
	if code != 2 || !strings.Contains(errs.String(), "--bootstrap "+path) {
		t.Errorf("exit %d, stderr %q; want 2 naming --bootstrap", code, errs.String())
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want no file", path, err)
	}
}
