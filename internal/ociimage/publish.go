package ociimage

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WriteLayout writes idx as an OCI image layout in dir (created if
// missing), as layout.Write does: the oci-layout file, every blob under
// blobs/sha256/, and idx's own manifest as index.json, so
// layout.ImageIndexFromPath(dir) has idx's digest. An index.json already
// in dir is replaced; blobs already there stay.
func WriteLayout(dir string, idx v1.ImageIndex) error {
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("ociimage: write layout %s: %w", dir, err)
	}
	return nil
}

// Push uploads idx, its images and their blobs to ref (a tag or digest
// reference, e.g. "ghcr.io/pinlab/pinlab-agent:v1"; registries on
// localhost, loopback or private addresses are spoken to over plain
// HTTP, as go-containerregistry's name package decides) and returns
// idx's digest, "sha256:<hex>". It blocks until the push ends or ctx
// does.
//
// Credentials come from authn.DefaultKeychain (the user's Docker config,
// $DOCKER_CONFIG/config.json or ~/.docker/config.json, and its credential
// helpers; anonymous where it has none). opts are applied after that
// default and before ctx: remote.WithAuthFromKeychain replaces the
// keychain; remote.WithAuth cannot be combined with it (remote rejects
// an Authenticator and a Keychain together, so Push then fails); a
// remote.WithContext is overridden by ctx.
func Push(ctx context.Context, ref string, idx v1.ImageIndex, opts ...remote.Option) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("ociimage: push: %w", err)
	}
	all := append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	all = append(all, remote.WithContext(ctx))
	if err := remote.WriteIndex(r, idx, all...); err != nil {
		return "", fmt.Errorf("ociimage: push %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return "", fmt.Errorf("ociimage: push %s: %w", ref, err)
	}
	return d.String(), nil
}

// Sizes returns, for each image of idx, its platform ("os/arch", or
// "os/arch/variant") and the sum of its layers' compressed sizes in
// bytes, as a registry stores them and a pull downloads them (manifests
// and config excluded). The sizes come from the manifests: for a remote
// index no layer is downloaded. An image without a platform in the index
// is an error.
func Sizes(idx v1.ImageIndex) (map[string]int64, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("ociimage: sizes: %w", err)
	}
	sizes := make(map[string]int64, len(im.Manifests))
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			return nil, fmt.Errorf("ociimage: sizes: manifest %s has no platform", desc.Digest)
		}
		n, err := compressedSize(idx, desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("ociimage: sizes of %s: %w", desc.Platform, err)
		}
		sizes[desc.Platform.String()] = n
	}
	return sizes, nil
}

func compressedSize(idx v1.ImageIndex, d v1.Hash) (int64, error) {
	img, err := idx.Image(d)
	if err != nil {
		return 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
