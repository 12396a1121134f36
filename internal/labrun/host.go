package labrun

import (
	"context"
	"os"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/lab"
)

// uiFD is the descriptor of the dashboard's listener that the command on
// the host hands to itself in the network namespace.
const uiFD = 3

// runOnHost is `lab run --control-plane kubernetes` before it enters its
// namespace: it checks the control plane's binaries and the dataplane's
// tools, binds the dashboard's address on the host's loopback (a socket
// stays in the namespace it was bound in, so the run inside serves the
// host's browser on it), and runs the whole command again inside, where
// Run does the work. It returns the command's exit code as an exit.Code
// (nil for 0): the command inside said what happened.
func runOnHost(ctx context.Context, opts Options) error {
	if err := kubelab.Check(lab.Dataplane(opts.Dataplane), kubelab.PodNetwork(opts.PodNetwork)); err != nil {
		return err
	}
	var files []*os.File
	if opts.UI {
		ln, err := listenUI(ctx, opts.UIAddr)
		if err != nil {
			return err
		}
		defer ln.Close()
		f, err := kubelab.ListenerFile(ln)
		if err != nil {
			return err
		}
		defer f.Close()
		files = append(files, f)
	}
	code, err := kubelab.Reexec(ctx, "lab run", opts.Notes, files...)
	if err != nil {
		return err // a *kubelab.KilledError says what was left
	}
	if code != 0 {
		return exit.Code(code)
	}
	return nil
}
