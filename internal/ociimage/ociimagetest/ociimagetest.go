// Package ociimagetest holds test helpers for images: an in-process
// registry on loopback, an index's image of one platform, and a file
// taken out of an image.
package ociimagetest

import (
	"archive/tar"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry starts go-containerregistry's in-memory registry on
// 127.0.0.1 for the rest of the test and returns its "host:port" and the
// remote option that reaches it. It first points authn.DefaultKeychain
// at empty directories (HermeticKeychain), so the user's credentials are
// neither read nor sent; the test must not be parallel (t.Setenv).
func Registry(t *testing.T) (string, remote.Option) {
	t.Helper()
	HermeticKeychain(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), remote.WithTransport(srv.Client().Transport)
}

// HermeticKeychain points authn.DefaultKeychain at empty directories for
// the rest of the test: Docker's config ($DOCKER_CONFIG, read instead of
// ~/.docker once set) and podman's auth files. HOME is left alone, so the
// go command a test runs keeps its build and module caches.
func HermeticKeychain(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"DOCKER_CONFIG", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"} {
		t.Setenv(k, dir)
	}
	t.Setenv("REGISTRY_AUTH_FILE", filepath.Join(dir, "none.json"))
}

// PlatformImage returns idx's image for goos/goarch, failing the test
// when it has none.
func PlatformImage(t *testing.T, idx v1.ImageIndex, goos, goarch string) v1.Image {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range im.Manifests {
		if p := desc.Platform; p != nil && p.OS == goos && p.Architecture == goarch {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no %s/%s image in %+v", goos, goarch, im.Manifests)
	return nil
}

// Extract writes file from img's flattened file system into a temporary
// directory, with its mode from the image, and returns its path.
func Extract(t *testing.T, img v1.Image, file string) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	path := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != file {
			continue
		}
		path = filepath.Join(t.TempDir(), file)
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, fs.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	if path == "" {
		t.Fatalf("no %s in the image", file)
	}
	return path
}
