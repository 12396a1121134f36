package labup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
)

// The descriptors of the host listeners lab up hands to itself in its
// network namespace: sockets stay in the namespace they were bound in, so
// the copy inside accepts connections made on the host's loopback.
const (
	controlFD = 3 // the control API
	kubeAPIFD = 4 // the API server's forwarder
)

// runOnHost is `lab up --control-plane kubernetes` before it enters its
// namespace: it checks the control plane's binaries and the dataplane's
// tools, binds the control API and the API server's forwarder on the
// host's loopback, and runs the whole command again in a new network
// namespace (and user namespace when not root), which it waits for.
// Everything else happens inside; its exit code returns as an exit.Code.
func runOnHost(ctx context.Context, opts Options) error {
	if err := kubelab.Check(lab.Dataplane(opts.Dataplane), kubelab.PodNetwork(opts.PodNetwork)); err != nil {
		return err // before binding anything
	}
	ctl, err := loopback.Listen(ctx, opts.Control)
	if err != nil {
		return listenError(err)
	}
	defer ctl.Close()
	kube, err := loopback.Listen(ctx, opts.KubeAPI)
	if err != nil {
		return fmt.Errorf("--kube-api %s: %w", opts.KubeAPI, err)
	}
	defer kube.Close()
	var files []*os.File
	for _, ln := range []net.Listener{ctl, kube} {
		f, err := kubelab.ListenerFile(ln)
		if err != nil {
			return err
		}
		defer f.Close()
		files = append(files, f)
	}
	code, err := kubelab.Reexec(ctx, "lab up", opts.Progress, files...)
	var killed *kubelab.KilledError
	if errors.As(err, &killed) {
		// The command inside could not remove the token file and the
		// kubeconfig it wrote: this one still holds the control address,
		// so no other lab's can be there.
		removeLabFiles(opts, ctl.Addr().String())
		return err
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return exit.Code(code)
	}
	return nil
}

// removeLabFiles removes the control API's token file and the kubeconfig
// a lab up serving the control address ctl writes (see serveControl and
// startKube).
func removeLabFiles(opts Options, ctl string) {
	token := opts.TokenFile
	if token == "" {
		token, _ = control.TokenPath(ctl)
	}
	if token != "" {
		os.Remove(token)
	}
	if dir, err := filesDir(opts, ctl); err == nil {
		_, port, _ := net.SplitHostPort(ctl)
		os.Remove(filepath.Join(dir, "kubeconfig-"+port))
	}
}

// handedOver are the listeners the host side handed over, until lab up
// takes them; close closes those not taken.
type handedOver struct {
	control, kube net.Listener
}

// inherit takes the listeners lab up's host side passed in.
func inherit() (*handedOver, error) {
	ctl, err := kubelab.Inherited(controlFD, "control API")
	if err != nil {
		return nil, err
	}
	kube, err := kubelab.Inherited(kubeAPIFD, "API server forwarder")
	if err != nil {
		ctl.Close()
		return nil, err
	}
	return &handedOver{control: ctl, kube: kube}, nil
}

// takeControl hands the control API's listener over; nil when there are
// none (on the host, the API binds its own).
func (h *handedOver) takeControl() net.Listener {
	if h == nil {
		return nil
	}
	ln := h.control
	h.control = nil
	return ln
}

// takeKube hands the forwarder's listener over.
func (h *handedOver) takeKube() net.Listener {
	ln := h.kube
	h.kube = nil
	return ln
}

func (h *handedOver) close() {
	for _, ln := range []net.Listener{h.control, h.kube} {
		if ln != nil {
			ln.Close()
		}
	}
}
