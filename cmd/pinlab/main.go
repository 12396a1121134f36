// Command pinlab shows gRPC connection pinning on Kubernetes in an embedded
// mini-cluster and measures what each fix does. See `pinlab --help`.
package main

import (
	"log/slog"
	"os"

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
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
