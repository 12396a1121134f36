package ociimage_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.uber.org/goleak"

	"github.com/pinlab/pinlab/internal/ociimage"
	"github.com/pinlab/pinlab/internal/ociimage/ociimagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// helloPkg is the test binary: a main package under testdata, which
// `go build ./...` skips but `go build ./testdata/hello` builds.
const helloPkg = "./testdata/hello"

// platforms are built in every test; arm64 costs one cold compile of the
// standard library (about 10 s on two cores), then hits the build cache.
var platforms = []string{"linux/amd64", "linux/arm64"}

var helloSpec = ociimage.Spec{
	Name:   "hello",
	Labels: map[string]string{"org.opencontainers.image.source": "https://github.com/pinlab/pinlab"},
}

// buildTimeout bounds one GoBuild of helloPkg for every platform, cold.
const buildTimeout = 5 * time.Minute

func goBuildHello(t *testing.T) []ociimage.Binary {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	defer cancel()
	bins, err := ociimage.GoBuild(ctx, helloPkg, platforms)
	if err != nil {
		t.Fatal(err)
	}
	return bins
}

var shared struct {
	once sync.Once
	bins []ociimage.Binary
}

// helloIndex is the index of helloSpec over one shared build of helloPkg.
func helloIndex(t *testing.T) (v1.ImageIndex, []ociimage.Binary) {
	t.Helper()
	shared.once.Do(func() { shared.bins = goBuildHello(t) })
	if shared.bins == nil {
		t.Fatal("the shared build of hello failed in an earlier test")
	}
	idx, err := ociimage.Index(helloSpec, shared.bins)
	if err != nil {
		t.Fatal(err)
	}
	return idx, shared.bins
}

func digest(t *testing.T, idx v1.ImageIndex) string {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func TestGoBuildIndexReproducible(t *testing.T) {
	first, second := goBuildHello(t), goBuildHello(t)
	for i := range first {
		if !bytes.Equal(first[i].Data, second[i].Data) {
			t.Errorf("%s: two builds differ", first[i].Platform())
		}
	}
	a, err := ociimage.Index(helloSpec, first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ociimage.Index(helloSpec, second)
	if err != nil {
		t.Fatal(err)
	}
	if da, db := digest(t, a), digest(t, b); da != db {
		t.Fatalf("index digests of two builds differ: %s and %s", da, db)
	}
	t.Logf("index digest, twice: %s", digest(t, a))

	// The digest must follow the content, or the equality above proves
	// nothing.
	changed := slices.Clone(second)
	changed[0].Data = append(slices.Clone(changed[0].Data), 0)
	c, err := ociimage.Index(helloSpec, changed)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, c) == digest(t, a) {
		t.Errorf("one byte more in %s left the digest at %s", changed[0].Platform(), digest(t, a))
	}
}

func TestPushPullRun(t *testing.T) {
	idx, _ := helloIndex(t)
	host, transport := ociimagetest.Registry(t)

	got, err := ociimage.Push(t.Context(), host+"/pinlab/hello:test", idx, transport)
	if err != nil {
		t.Fatal(err)
	}
	if want := digest(t, idx); got != want {
		t.Fatalf("Push returned %s, the index is %s", got, want)
	}
	ref, err := name.ParseReference(host + "/pinlab/hello@" + got)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(ref, transport, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	if d := digest(t, pulled); d != got {
		t.Fatalf("pulled index %s, pushed %s", d, got)
	}
	img := ociimagetest.PlatformImage(t, pulled, "linux", "amd64")
	checkConfig(t, img, "amd64")
	checkLayer(t, img)
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("cannot run a linux/amd64 binary on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	bin := ociimagetest.Extract(t, img, "hello")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "x", "y").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	if diff := cmp.Diff("hello from ociimage linux/amd64 args=x,y\n", string(out)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func checkConfig(t *testing.T, img v1.Image, arch string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := strings.Cut(cf.Config.User, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("config.User = %q, want a non-root user", cf.Config.User)
	}
	want := struct {
		User, WorkingDir, OS, Arch string
		Entrypoint, Env            []string
		Created                    time.Time
		Labels                     map[string]string
	}{
		ociimage.DefaultUser, "/", "linux", arch,
		[]string{"/hello"}, []string{ociimage.Path},
		time.Unix(0, 0).UTC(), helloSpec.Labels,
	}
	got := want
	got.User, got.WorkingDir, got.OS, got.Arch = cf.Config.User, cf.Config.WorkingDir, cf.OS, cf.Architecture
	got.Entrypoint, got.Env, got.Created, got.Labels = cf.Config.Entrypoint, cf.Config.Env, cf.Created.Time.UTC(), cf.Config.Labels
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

// checkLayer checks that the image has one layer holding only the
// binary, root-owned, read and execute for all, with a fixed mtime.
func checkLayer(t *testing.T, img v1.Image) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type entry struct {
		Name     string
		Type     byte
		Mode     fs.FileMode
		UID, GID int
		ModTime  time.Time
	}
	var got []entry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, entry{h.Name, h.Typeflag, fs.FileMode(h.Mode), h.Uid, h.Gid, h.ModTime.UTC()})
	}
	want := []entry{{"hello", tar.TypeReg, 0o555, 0, 0, time.Unix(0, 0).UTC()}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}

func TestWriteLayout(t *testing.T) {
	idx, _ := helloIndex(t)
	dir := filepath.Join(t.TempDir(), "layout")
	if err := ociimage.WriteLayout(dir, idx); err != nil {
		t.Fatal(err)
	}
	back, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := digest(t, back), digest(t, idx); got != want {
		t.Fatalf("layout index %s, written %s", got, want)
	}
	checkLayer(t, ociimagetest.PlatformImage(t, back, "linux", "arm64"))
	checkConfig(t, ociimagetest.PlatformImage(t, back, "linux", "arm64"), "arm64")
}

func TestSizes(t *testing.T) {
	idx, bins := helloIndex(t)
	sizes, err := ociimage.Sizes(idx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k, n := range sizes {
		keys = append(keys, k)
		t.Logf("%s: %d compressed bytes", k, n)
	}
	slices.Sort(keys)
	if diff := cmp.Diff(platforms, keys); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
	for _, b := range bins {
		// gzip shrinks a stripped Go binary to about half; the size of
		// the uncompressed tar, or zero, is a bug.
		if n := sizes[b.Platform()]; n <= 0 || n >= int64(len(b.Data)) {
			t.Errorf("%s: %d compressed bytes for a %d-byte binary", b.Platform(), n, len(b.Data))
		}
	}
}

func TestIndexRefuses(t *testing.T) {
	bin := ociimage.Binary{OS: "linux", Arch: "amd64", Data: []byte("x")}
	tests := []struct {
		name string
		spec ociimage.Spec
		bins []ociimage.Binary
	}{
		{"no name", ociimage.Spec{}, []ociimage.Binary{bin}},
		{"name with a slash", ociimage.Spec{Name: "bin/hello"}, []ociimage.Binary{bin}},
		{"dot dot", ociimage.Spec{Name: ".."}, []ociimage.Binary{bin}},
		{"no binaries", helloSpec, nil},
		{"two of one platform", helloSpec, []ociimage.Binary{bin, bin}},
		{"empty binary", helloSpec, []ociimage.Binary{{OS: "linux", Arch: "amd64"}}},
		{"no arch", helloSpec, []ociimage.Binary{{OS: "linux", Data: []byte("x")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ociimage.Index(tt.spec, tt.bins); err == nil {
				t.Error("Index succeeded, want an error")
			}
		})
	}
}

func TestGoBuildRefuses(t *testing.T) {
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name      string
		ctx       context.Context
		pkg       string
		platforms []string
		wantIs    error
	}{
		{"no platforms", t.Context(), helloPkg, nil, nil},
		{"no arch", t.Context(), helloPkg, []string{"linux"}, nil},
		{"variant", t.Context(), helloPkg, []string{"linux/arm/v7"}, nil},
		{"no such package", t.Context(), "./testdata/none", []string{"linux/amd64"}, nil},
		{"cancelled", cancelled, helloPkg, []string{"linux/amd64"}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bins, err := ociimage.GoBuild(tt.ctx, tt.pkg, tt.platforms)
			if err == nil {
				t.Fatalf("GoBuild returned %d binaries, want an error", len(bins))
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("GoBuild: %v, want %v", err, tt.wantIs)
			}
		})
	}
}
