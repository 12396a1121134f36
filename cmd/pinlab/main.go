// Command pinlab shows gRPC connection pinning on Kubernetes in an embedded
// mini-cluster and measures what each fix does. See `pinlab --help`.
package main

import (
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/pinlab/pinlab/internal/cli"
)

func main() {
	// client-go logs through klog to stderr ("Waited before sending
	// request" when its rate limiter holds a request back, against a real
	// API server); pinlab's own messages say what matters. klog's logger is
	// process-wide, so it is set here, once, before anything runs, and not
	// in cli.Main, which tests call concurrently with informers running.
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	// A reader that goes away (`pinlab lab up | head -3`) must not kill
	// pinlab by SIGPIPE before it has stopped its lab, control plane and
	// token files: with SIGPIPE ignored a write to the closed pipe fails
	// with EPIPE instead, and the command goes on until Ctrl-C or its end.
	// (Notify would be wrong: it also delivers the SIGPIPEs of sockets
	// whose peer went away.)
	signal.Ignore(syscall.SIGPIPE)
	// Installed as kubectl-pinlab (krew, deploy/krew), kubectl runs it for
	// `kubectl pinlab ...`: help says so.
	if strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe") == "kubectl-pinlab" {
		cli.DisplayName = "kubectl pinlab"
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
