// Command agent-image builds the container image of cmd/pinlab-agent
// without a container engine: it cross-compiles the agent with the go
// command (so it needs a Go toolchain and this module's source tree) and
// assembles a multi-platform OCI image index in-process with
// internal/ociimage: the static binary at /pinlab-agent on an empty base,
// running as 65532:65532. The same source and toolchain give the same
// index digest.
//
// Usage, from anywhere in the module:
//
//	go run ./build/agent-image [-platforms linux/amd64,linux/arm64]
//	    [-oci-layout DIR] [-push REF] [-tar FILE [-tag REF]]
//
// -oci-layout writes an OCI image layout (for crane, skopeo, oras);
// -push uploads to a registry with the credentials of the user's Docker
// config; -tar writes a `docker load` / `kind load image-archive`
// tarball, which holds one image, so it needs exactly one platform. With
// none of them it only builds. It prints the index digest and each
// platform's compressed size. It exits 0 on success, 1 on a failure and
// 2 on a bad flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/pinlab/pinlab/internal/imagebuild"
	"github.com/pinlab/pinlab/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	platforms []string
	layout    string // -oci-layout DIR; "" writes none
	push      string // -push REF; "" pushes nothing
	tar       string // -tar FILE; "" writes none
	tag       string // -tag REF, the name -tar's image loads as
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "agent-image:", err)
		return 2
	}
	if err := build(ctx, opts, stdout); err != nil {
		fmt.Fprintln(stderr, "agent-image:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("agent-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	platforms := fs.String("platforms", strings.Join(imagebuild.Platforms, ","), "comma-separated os/arch list")
	var o options
	fs.StringVar(&o.layout, "oci-layout", "", "write an OCI image layout to this directory")
	fs.StringVar(&o.push, "push", "", "push the index to this reference, e.g. ghcr.io/pinlab/pinlab-agent:dev")
	fs.StringVar(&o.tar, "tar", "", "write a docker-load tarball of the one platform to this file")
	fs.StringVar(&o.tag, "tag", "pinlab-agent:dev", "the name the -tar image loads as")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.platforms = strings.Split(*platforms, ",")
	if o.tar != "" && len(o.platforms) != 1 {
		return options{}, fmt.Errorf("-tar holds one image: give one -platforms, not %d", len(o.platforms))
	}
	return o, nil
}

// build builds the agent and its index, prints the digest and sizes, and
// writes or pushes what opts ask for.
func build(ctx context.Context, opts options, stdout io.Writer) error {
	res, err := imagebuild.Build(ctx, imagebuild.Request{Image: imagebuild.Agent, Platforms: opts.platforms, Layout: opts.layout, Push: opts.push})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "index %s\n", res.Digest)
	for _, p := range slices.Sorted(maps.Keys(res.Sizes)) {
		fmt.Fprintf(stdout, "%s %d bytes compressed\n", p, res.Sizes[p])
	}
	if opts.layout != "" {
		fmt.Fprintf(stdout, "wrote OCI layout %s\n", opts.layout)
	}
	if opts.tar != "" {
		if err := writeTar(opts.tar, opts.tag, res.Binaries[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s as %s (%s)\n", opts.tar, opts.tag, res.Binaries[0].Platform())
	}
	if res.Pushed != "" {
		fmt.Fprintf(stdout, "pushed %s\n", res.Pushed)
	}
	return nil
}

func writeTar(file, tag string, bin ociimage.Binary) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	img, err := ociimage.Image(imagebuild.Agent.Spec, bin)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(file, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}
