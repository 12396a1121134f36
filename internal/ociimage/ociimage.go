// Package ociimage builds reproducible OCI images of small static binaries
// in-process, with go-containerregistry and without a container engine: no
// Docker daemon, no Dockerfile, no base image to pull. It does what ko
// (github.com/ko-build/ko) does for a Go main package, in the few lines
// pinlab needs: one image per platform on an empty base (scratch), one
// layer holding the binary, a config whose every field is fixed, so the
// same binaries give the same index digest on every machine.
//
// The image's file system is a single file, /<Spec.Name>, at the root (not
// ko's /ko-app/<name> nor /usr/local/bin/<name>: the image has no other
// file, so a directory would only add entries), owned by 0:0 with mode
// 0555. The process runs as Spec.User, 65532:65532 by default (the
// distroless "nonroot" ids); the image has no /etc/passwd, so the user is
// given as numeric ids. The config's Env is PATH alone (see Path).
//
// Digests depend on the bytes of the binaries, the Spec, and the gzip of
// the Go release that compiled this package (compress/gzip at
// BestCompression; Go does not promise the same output across releases).
// Index descriptors carry the artifactType that go-containerregistry
// v0.22 sets for every image (the config's media type), which the OCI
// image spec 1.1 allows.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultUser is the user and group an image runs as when Spec.User is
// empty: 65532:65532, the "nonroot" ids of the distroless images (and of
// ko's default base), so runAsNonRoot pod security admits the image
// without a securityContext.
const DefaultUser = "65532:65532"

// Path is the whole Env of every image: Docker's default PATH with the
// root directory, where the binary lies, appended (as ko appends
// /ko-app), so a Kubernetes command of just the bare Name resolves.
const Path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/"

// epoch is the fixed time of every image: the config's created time, its
// history entry and the layer file's mtime. Like ko and
// SOURCE_DATE_EPOCH=0 builds, it is the Unix epoch.
var epoch = time.Unix(0, 0).UTC()

// Binary is one platform's executable.
type Binary struct {
	// OS and Arch are the platform in Go's terms (GOOS and GOARCH), which
	// are the OCI platform's os and architecture for every pair an image
	// of a static Go binary can have, e.g. "linux" and "amd64".
	OS, Arch string
	// Data is the executable's content; it must not be empty.
	Data []byte
}

// Platform returns the binary's platform as "os/arch", the form Sizes
// keys its result by and GoBuild takes.
func (b Binary) Platform() string { return b.OS + "/" + b.Arch }

// Spec is what an image holds besides the binary. Its zero value is not
// usable: Name is required.
type Spec struct {
	// Name is the binary's file name; the binary is placed at /<Name>, at
	// the root of the image. It must be a plain file name (no "/", not
	// "." or "..").
	Name string
	// Entrypoint is the config's Entrypoint; nil or empty means
	// ["/"+Name]. The image has no Cmd.
	Entrypoint []string
	// User is the config's User, "uid:gid" or "uid"; empty means
	// DefaultUser (non-root). The image has no /etc/passwd, so names other
	// than ids do not resolve.
	User string
	// Labels become the config's Labels (what `docker inspect` shows and
	// GitHub reads org.opencontainers.image.source from) and the
	// annotations of the index and of every image manifest (where the OCI
	// image spec puts them). Nil means none.
	Labels map[string]string
}

// Index builds a multi-platform image index with one image per Binary, in
// the order given, on an empty base: OCI media types throughout, one
// gzip layer holding the binary, and a config with Entrypoint, User,
// WorkingDir "/", Env [Path], OS, Architecture, Labels and a created time
// fixed at the Unix epoch, so the same binaries and Spec give the same
// digest. Two binaries of one platform are an error. The index and its
// images are held in memory.
func Index(spec Spec, bins []Binary) (v1.ImageIndex, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if len(bins) == 0 {
		return nil, fmt.Errorf("ociimage: no binaries")
	}
	var idx v1.ImageIndex = empty.Index
	seen := map[string]bool{}
	for _, b := range bins {
		if seen[b.Platform()] {
			return nil, fmt.Errorf("ociimage: two binaries for %s", b.Platform())
		}
		seen[b.Platform()] = true
		img, err := Image(spec, b)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: b.OS, Architecture: b.Arch},
			},
		})
	}
	if len(spec.Labels) > 0 {
		idx = mutate.Annotations(idx, spec.Labels).(v1.ImageIndex)
	}
	return idx, nil
}

// Image builds the image of one binary, as Index does for each.
func Image(spec Spec, b Binary) (v1.Image, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if b.OS == "" || b.Arch == "" || len(b.Data) == 0 {
		return nil, fmt.Errorf("ociimage: binary %q needs OS, Arch and Data", b.Platform())
	}
	layer, err := binaryLayer(spec.Name, b.Data)
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer for %s: %w", b.Platform(), err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "pinlab ociimage: /" + spec.Name,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: image for %s: %w", b.Platform(), err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: config for %s: %w", b.Platform(), err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture = b.OS, b.Arch
	cf.Config = spec.config()
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("ociimage: config for %s: %w", b.Platform(), err)
	}
	if len(spec.Labels) > 0 {
		img = mutate.Annotations(img, spec.Labels).(v1.Image)
	}
	return img, nil
}

func (s Spec) validate() error {
	if s.Name == "" || s.Name == "." || s.Name == ".." || strings.ContainsAny(s.Name, "/\x00") {
		return fmt.Errorf("ociimage: name %q is not a plain file name", s.Name)
	}
	return nil
}

// config is the runtime part of the image config, defaults applied.
func (s Spec) config() v1.Config {
	c := v1.Config{
		Entrypoint: s.Entrypoint,
		User:       s.User,
		WorkingDir: "/",
		Env:        []string{Path},
		Labels:     maps.Clone(s.Labels),
	}
	if len(c.Entrypoint) == 0 {
		c.Entrypoint = []string{"/" + s.Name}
	}
	if c.User == "" {
		c.User = DefaultUser
	}
	return c
}

// binaryLayer is a gzip layer of one file, name, at the root: mode 0555,
// owner 0:0 without names, mtime epoch, so its bytes depend only on name
// and data.
func binaryLayer(name string, data []byte) (v1.Layer, error) {
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o555,
		Size:     int64(len(data)),
		ModTime:  epoch,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	gz := gzBuf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
