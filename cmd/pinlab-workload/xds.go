package main

import (
	"context"
	"io"
	"net"
	"os"

	"github.com/pinlab/pinlab/internal/xds"
	"k8s.io/client-go/rest"
)

// runXDS runs `xds serve` (xds.Main) in a cluster's pod, with the pod's
// service account (deploy/xds), until a signal arrives on sig; it returns
// the exit code.
func runXDS(args []string, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	h := xds.Host{Stdout: stdout, Stderr: stderr, Listen: func(_ context.Context, addr string) (net.Listener, error) { return net.Listen("tcp", addr) }}
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
