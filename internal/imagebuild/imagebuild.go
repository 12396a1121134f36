// Package imagebuild builds pinlab's container images from this module's
// source, in-process, without a container engine: the go command
// cross-compiles a main package of the module (package ociimage's
// GoBuild) and package ociimage assembles a reproducible multi-platform
// index, which Build then writes as an OCI layout or pushes.
//
// The images:
//   - Workload, the pinlab image a real cluster's pods run
//     (cmd/pinlab-workload, at /pinlab): `pinlab image build`;
//   - Agent, the pinlab-agent that diagnose adds as an ephemeral
//     container (cmd/pinlab-agent, at /pinlab-agent): build/agent-image.
package imagebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/pinlab/pinlab/internal/ociimage"
)

// Module is the module whose source the images are built from.
const Module = "github.com/pinlab/pinlab"

// Image is one of pinlab's images: the main package it holds, by import
// path, and what the image holds besides the binary.
type Image struct {
	Pkg  string
	Spec ociimage.Spec
}

// titleLabel is the config label that names the image.
const titleLabel = "org.opencontainers.image.title"

// labels are every image's config labels: where the source is, and what
// the image is.
func labels(title string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.source": "https://github.com/pinlab/pinlab",
		titleLabel:                        title,
	}
}

// Workload is the pinlab image: cmd/pinlab-workload as /pinlab, its
// entrypoint, so the lab's pod specs (args [pod, pricing, ...], or
// command [pinlab, pod, ...]) run on a real cluster once their image
// names it.
var Workload = Image{
	Pkg:  Module + "/cmd/pinlab-workload",
	Spec: ociimage.Spec{Name: "pinlab", Labels: labels("pinlab")},
}

// Agent is the pinlab-agent image: cmd/pinlab-agent as /pinlab-agent.
var Agent = Image{
	Pkg:  Module + "/cmd/pinlab-agent",
	Spec: ociimage.Spec{Name: "pinlab-agent", Labels: labels("pinlab-agent")},
}

// Platforms are the platforms an image is built for when a Request names
// none.
var Platforms = []string{"linux/amd64", "linux/arm64"}

// MaxCompressed is the most compressed layer bytes one platform's image
// may have, 25 MB (not MiB): a static binary on an empty base stays well
// under it (the
// workload was 15.8 MB for linux/amd64 when this was written, 8.3 MB of
// it the pod servers; the load client brings client-go).
const MaxCompressed = 25_000_000

// Request is what Build builds and where it puts it.
type Request struct {
	// Image is the image to build.
	Image Image
	// Platforms are "os/arch" pairs in Go's terms, in any order (the index
	// lists them sorted); nil means Platforms.
	Platforms []string
	// Layout, if not empty, is a directory to write the index to as an
	// OCI image layout (created if missing).
	Layout string
	// Push, if not empty, is a reference to push the index to, with the
	// user's registry credentials (ociimage.Push says which).
	Push string
	// PushOptions are passed to ociimage.Push (a test's transport).
	PushOptions []remote.Option
}

// Result is what Build made.
type Result struct {
	// Index is the image index; Digest its digest, "sha256:<hex>".
	Index  v1.ImageIndex
	Digest string
	// Sizes are each platform's compressed layer bytes, by "os/arch".
	Sizes map[string]int64
	// Binaries are the compiled binaries, one per platform, in order.
	Binaries []ociimage.Binary
	// Pushed is the pushed repository "@" Digest, the reference a pod
	// spec pins the image with (e.g. "ghcr.io/acme/pinlab@sha256:..."),
	// once pushed; empty otherwise.
	Pushed string
}

// ErrNoSource is returned (wrapped) when the go command is missing or the
// current directory is not inside this module's source tree: the images
// are compiled from source.
var ErrNoSource = errors.New("the images are compiled from pinlab's source: run this inside a pinlab checkout, with the go command (Go 1.26) on PATH")

// Build compiles r.Image's package for each platform, assembles the index,
// refuses an image over MaxCompressed, then writes the layout and pushes
// as r asks, in that order. It runs the go command in the current
// directory, which must be inside this module (ErrNoSource otherwise);
// builds and pushes are bounded by ctx. The same source, toolchain and
// platforms give the same digest.
func Build(ctx context.Context, r Request) (Result, error) {
	// Sorted: the index lists its images in this order, and the digest
	// must not depend on how the platforms were written.
	platforms := r.Platforms
	if len(platforms) == 0 {
		platforms = Platforms
	}
	platforms = slices.Sorted(slices.Values(platforms))
	if err := checkSource(ctx); err != nil {
		return Result{}, err
	}
	bins, err := ociimage.GoBuild(ctx, r.Image.Pkg, platforms)
	if err != nil {
		return Result{}, err
	}
	res := Result{Binaries: bins}
	if res.Index, err = ociimage.Index(r.Image.Spec, bins); err != nil {
		return Result{}, err
	}
	d, err := res.Index.Digest()
	if err != nil {
		return Result{}, err
	}
	res.Digest = d.String()
	if res.Sizes, err = ociimage.Sizes(res.Index); err != nil {
		return Result{}, err
	}
	for p, n := range res.Sizes {
		if n > MaxCompressed {
			return Result{}, fmt.Errorf("the %s image is %d bytes compressed, over the limit of %d", p, n, MaxCompressed)
		}
	}
	if r.Layout != "" {
		if err := ociimage.WriteLayout(r.Layout, res.Index); err != nil {
			return Result{}, err
		}
	}
	if r.Push != "" {
		ref, err := name.ParseReference(r.Push)
		if err != nil {
			return Result{}, fmt.Errorf("push: %w", err)
		}
		if _, err := ociimage.Push(ctx, r.Push, res.Index, r.PushOptions...); err != nil {
			return Result{}, err
		}
		res.Pushed = ref.Context().Name() + "@" + res.Digest
	}
	return res, nil
}

// checkSource returns ErrNoSource, with what was found instead, unless the
// go command runs and the current directory's main module is Module.
func checkSource(ctx context.Context) error {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "list", "-m")
	cmd.Env = append(os.Environ(), ociimage.ReproducibleEnv...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w (go list -m: %v %s)", ErrNoSource, err, strings.TrimSpace(errOut.String()))
	}
	got := strings.TrimSpace(out.String())
	if got == "command-line-arguments" {
		return fmt.Errorf("%w (the current directory is in no Go module)", ErrNoSource)
	}
	if got != Module {
		return fmt.Errorf("%w (the current directory's module is %q)", ErrNoSource, got)
	}
	return nil
}

// LayoutDigests reads the OCI image layout in dir that Build wrote for
// the Workload image (Request.Layout), or that `crane pull --format oci`
// or skopeo wrote of it (an index.json whose one entry is the image
// index), and returns the digests a pod on a node of platform ("os/arch")
// may pin it by: the index's, then that platform's image's. A layout
// without an image for platform is an error, as a node would fail to
// pull it; so is one whose images are not the Workload image (their
// title label says another), and a directory that is not an OCI layout.
func LayoutDigests(dir, platform string) ([]string, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout (write one with pinlab image build --oci-layout %s): %w", dir, dir, err)
	}
	idx, err = imageIndex(idx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var have []string
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: image %s: %w", dir, m.Digest, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("%s: image %s: %w", dir, m.Digest, err)
		}
		if title := cf.Config.Labels[titleLabel]; title != Workload.Spec.Name {
			return nil, fmt.Errorf("%s: image %s is %q, not the pinlab image", dir, m.Digest, title)
		}
		if m.Platform != nil && m.Platform.String() == platform {
			return []string{d.String(), m.Digest.String()}, nil
		}
		if m.Platform != nil {
			have = append(have, m.Platform.String())
		}
	}
	return nil, fmt.Errorf("%s holds no %s image (it has %v): build it with --platforms %s", dir, platform, have, platform)
}

// imageIndex returns the image index a layout's index.json holds: itself
// when it lists images, as Build writes it, or the one index it lists, as
// crane and skopeo write a pulled index.
func imageIndex(idx v1.ImageIndex) (v1.ImageIndex, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(im.Manifests) == 1 && im.Manifests[0].MediaType.IsIndex() {
		return idx.ImageIndex(im.Manifests[0].Digest)
	}
	return idx, nil
}
