package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
)

// Usage is the usage line of the image's `xds serve` command (Main).
const Usage = "pinlab xds serve [--listen ADDR] [--advertise ADDR] [--namespace NS] [--bootstrap FILE]"

// ImageListen is where the image's `xds serve` listens unless told: every
// address of its pod, port 18000.
const ImageListen = ":18000"

// Host is what the image's `xds serve` process gets from the pod it runs
// in: the pod's in-cluster credentials (rest.InClusterConfig, or the lab
// node's equivalent) and its network.
type Host struct {
	// REST is the pod's in-cluster config. When it is nil, NoREST says
	// why (no service account token, not in a cluster).
	REST   *rest.Config
	NoREST error
	// Listen opens the server's listener (ServeConfig.ListenFunc).
	// Required: the image's process passes net.Listen's, the lab's node
	// one that listens on the pod IP; nil exits 1.
	Listen func(ctx context.Context, addr string) (net.Listener, error)
	// NoFiles says the process has no filesystem of its own (the lab's
	// node runs it in-process, as the lab's user): --bootstrap, which
	// would write and then remove a file there, is refused (exit 2).
	NoFiles bool
	// Stdout and Stderr are the container's output.
	Stdout, Stderr io.Writer
}

// Main runs the image's `xds` command, args starting with "xds" (then
// "serve" and its flags, as Usage), with h's credentials, until ctx ends
// (the container's SIGTERM). It returns the process's exit code: 0 when
// stopped or after --help, 2 for bad args, 1 when it cannot serve (no
// credentials, a listen error, an API server it cannot list: see Serve).
func Main(ctx context.Context, args []string, h Host) int {
	if slices.Contains(args, "--help") || slices.Contains(args, "-h") {
		fmt.Fprintln(h.Stdout, Usage)
		return 0
	}
	if len(args) < 2 || args[0] != "xds" || args[1] != "serve" {
		fmt.Fprintf(h.Stderr, "pinlab xds: want the serve command\n%s\n", Usage)
		return 2
	}
	fs := pflag.NewFlagSet("xds serve", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg ServeConfig
	fs.StringVar(&cfg.Listen, "listen", ImageListen, "address to serve xDS on")
	fs.StringVar(&cfg.Advertise, "advertise", "", "address clients dial, for the bootstrap")
	fs.StringVarP(&cfg.Namespace, "namespace", "n", "", "serve only this namespace's Services")
	fs.StringVar(&cfg.BootstrapFile, "bootstrap", "", "write the clients' bootstrap JSON here")
	if err := fs.Parse(args[2:]); err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected arguments %q", fs.Args())
		}
		fmt.Fprintf(h.Stderr, "pinlab xds serve: %v\n%s\n", err, Usage)
		return 2
	}
	if h.NoFiles && cfg.BootstrapFile != "" {
		fmt.Fprintf(h.Stderr, "pinlab xds serve: --bootstrap %s: this node runs the container without a filesystem of its own; clients build the bootstrap from the Service's address (docs/xds.md)\n", cfg.BootstrapFile)
		return 2
	}
	if h.Listen == nil {
		fmt.Fprintln(h.Stderr, "pinlab xds serve: no network to listen on (xds.Host.Listen)")
		return 1
	}
	if h.REST == nil {
		fmt.Fprintf(h.Stderr, "pinlab xds serve: %v (it runs in a cluster's pod, with a service account: deploy/xds)\n",
			errors.Join(errors.New("no in-cluster credentials"), h.NoREST))
		return 1
	}
	cfg.REST, cfg.ListenFunc, cfg.Out = h.REST, h.Listen, h.Stdout
	if err := Serve(ctx, cfg); err != nil {
		fmt.Fprintf(h.Stderr, "pinlab xds serve: %v\n", err)
		return 1
	}
	return 0
}
