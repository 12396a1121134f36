package main

import (
	"context"
	"io"
	"os"

	"github.com/pinlab/pinlab/internal/xds"
	"k8s.io/client-go/rest"
)

// runXDS runs `xds serve` (xds.Main) in a cluster's pod, with the pod's
// service account (deploy/xds), until a signal arrives on sig; it returns
// the exit code.
func runXDS(args []string, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	h := xds.Host{Stdout: stdout, Stderr: stderr}
	h.REST, h.NoREST = rest.InClusterConfig()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	return xds.Main(ctx, args, h)
}
