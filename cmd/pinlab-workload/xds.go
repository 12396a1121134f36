package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/pinlab/pinlab/internal/xds"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
)

// xdsUsage is the xds command's line of the usage.
const xdsUsage = "pinlab xds serve [--listen ADDR] [--advertise ADDR] [--namespace NS] [--bootstrap FILE]"

// runXDS runs `xds serve` (package xds) in a cluster's pod, with the pod's
// service account (deploy/xds), until a signal arrives on sig; it returns
// the exit code.
func runXDS(args []string, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	if slices.Contains(args, "--help") || slices.Contains(args, "-h") {
		fmt.Fprintln(stdout, xdsUsage)
		return 0
	}
	if len(args) < 2 || args[1] != "serve" {
		fmt.Fprintf(stderr, "pinlab xds: want the serve command\n%s\n", xdsUsage)
		return 2
	}
	fs := pflag.NewFlagSet("xds serve", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg xds.ServeConfig
	fs.StringVar(&cfg.Listen, "listen", ":18000", "address to serve xDS on")
	fs.StringVar(&cfg.Advertise, "advertise", "", "address clients dial, for the bootstrap")
	fs.StringVar(&cfg.Namespace, "namespace", "", "serve only this namespace's Services")
	fs.StringVar(&cfg.BootstrapFile, "bootstrap", "", "write the clients' bootstrap JSON here")
	if err := fs.Parse(args[2:]); err != nil || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pinlab xds serve: %v\n%s\n", errors.Join(err, extraArgs(fs.Args())), xdsUsage)
		return 2
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintf(stderr, "pinlab xds serve: %v (it runs in a cluster's pod, with a service account: deploy/xds)\n", err)
		return 1
	}
	cfg.REST, cfg.Out = rc, stdout
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := xds.Serve(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "pinlab xds serve: %v\n", err)
		return 1
	}
	return 0
}

// extraArgs is an error for arguments after the flags, or nil.
func extraArgs(rest []string) error {
	if len(rest) == 0 {
		return nil
	}
	return fmt.Errorf("unexpected arguments %q", rest)
}
