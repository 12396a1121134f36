package imagebuild_test

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/imagebuild"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/machinetest"
	"github.com/pinlab/pinlab/internal/ociimage"
	"github.com/pinlab/pinlab/internal/ociimage/ociimagetest"
	"github.com/pinlab/pinlab/internal/podtest"
)

// TestMain holds the machine (machinetest) while it compiles the image
// for two platforms, about 2 min of both cores: beside the real control
// plane tier's cluster run tests it overloaded them (CI at 80d7866, load
// 3.8, once xds serve made the image larger).
func TestMain(m *testing.M) {
	machinetest.Hold() // released when the process exits (an flock lock)
	goleak.VerifyTestMain(m)
}

// buildTimeout bounds one Build of the workload for both platforms, cold
// (about 50 s on two cores; 6 s from the build cache). It is a bound on a
// hang, not on speed: on a new machine (an empty Go build cache for
// linux/arm64) beside the rest of CI (load 9.4) the first Build took
// 9 min 59 s, and 5 min each failed the test (2026-12-05).
const buildTimeout = 10 * time.Minute

// TestWorkloadImage builds the workload image twice (the same digest,
// the second time with GOAMD64 and GOFLAGS set),
// pushes it to a registry on loopback, pulls it back by digest, and runs
// its linux/amd64 binary as a pod that answers a gRPC call and drains on
// SIGTERM.
func TestWorkloadImage(t *testing.T) {
	host, transport := ociimagetest.Registry(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*buildTimeout)
	defer cancel()
	ref := host + "/acme/pinlab:dev"
	start := time.Now()
	first, err := imagebuild.Build(ctx, imagebuild.Request{Image: imagebuild.Workload, Push: ref, PushOptions: []remote.Option{transport}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first build and push: %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	// The caller's environment does not reach the binary.
	t.Setenv("GOAMD64", "v3")
	t.Setenv("GOFLAGS", "-tags=pinlabtest")
	dir := t.TempDir()
	second, err := imagebuild.Build(ctx, imagebuild.Request{Image: imagebuild.Workload, Layout: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second build and layout: %v", time.Since(start).Round(time.Millisecond))
	if first.Digest != second.Digest {
		t.Fatalf("two builds of one source differ: %s and %s", first.Digest, second.Digest)
	}
	t.Logf("index %s, compressed bytes %v", first.Digest, first.Sizes)
	for _, p := range imagebuild.Platforms {
		if n := first.Sizes[p]; n < 1<<20 || n > imagebuild.MaxCompressed {
			t.Errorf("%s: %d bytes compressed, want 1 MiB to %d bytes", p, n, imagebuild.MaxCompressed)
		}
	}
	checkLayoutDigests(t, dir, first)
	// As crane and skopeo write a pulled index: index.json lists it.
	wrapped := t.TempDir()
	if err := ociimage.WriteLayout(wrapped, mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: first.Index})); err != nil {
		t.Fatal(err)
	}
	checkLayoutDigests(t, wrapped, first)
	if want := host + "/acme/pinlab@" + first.Digest; first.Pushed != want {
		t.Errorf("Pushed = %q, want %q", first.Pushed, want)
	}

	pinned, err := name.ParseReference(first.Pushed)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(pinned, transport, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := pulled.Digest(); err != nil || d.String() != first.Digest {
		t.Fatalf("pulled index %v (%v), pushed %s", d, err, first.Digest)
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("cannot run a linux/amd64 binary on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	bin := ociimagetest.Extract(t, ociimagetest.PlatformImage(t, pulled, "linux", "amd64"), "pinlab")
	runPod(t, bin)
}

// checkLayoutDigests checks that the layout in dir gives the index's
// digest and its linux/amd64 image's, and nothing for a platform it lacks.
func checkLayoutDigests(t *testing.T, dir string, built imagebuild.Result) {
	t.Helper()
	digests, err := imagebuild.LayoutDigests(dir, "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	amd64 := ociimagetest.PlatformImage(t, built.Index, "linux", "amd64")
	d, err := amd64.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{built.Digest, d.String()}; !slices.Equal(digests, want) {
		t.Errorf("LayoutDigests(%s, linux/amd64) = %v, want %v", dir, digests, want)
	}
	if got, err := imagebuild.LayoutDigests(dir, "linux/s390x"); err == nil || !strings.Contains(err.Error(), "holds no linux/s390x image") {
		t.Errorf("LayoutDigests for a platform it lacks: %v, %v", got, err)
	}
}

// runPod runs bin as the pod command on a loopback address, calls it and
// stops it with SIGTERM.
func runPod(t *testing.T, bin string) {
	const ip = "127.207.2.1"
	var out labtest.Buffer
	cmd := exec.Command(bin, "pod", "pricing", "--port", "8471")
	cmd.Env = []string{"PINLAB_LISTEN_IP=" + ip, "POD_NAME=pricing-0", "POD_NAMESPACE=shop"}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cc := podtest.Dial(t, ip+":8471", netip.Addr{})
	resp, err := pricingv1.NewPricingClient(cc).GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("GetPrice: %v\n%s", err, out.String())
	}
	if resp.GetPod() != "pricing-0" {
		t.Errorf("answered by %q, want pricing-0", resp.GetPod())
	}
	cc.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("still running 10 s after SIGTERM:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "pinlab pod shop/pricing-0: serving gRPC") {
		t.Errorf("output lacks the serving line:\n%s", out.String())
	}
}

// TestLayoutDigestsRefuses: a directory that is not a layout, and a
// layout of another image, give no digests.
func TestLayoutDigestsRefuses(t *testing.T) {
	other, err := ociimage.Index(ociimage.Spec{Name: "other", Labels: map[string]string{"org.opencontainers.image.title": "other"}},
		[]ociimage.Binary{{OS: "linux", Arch: "amd64", Data: []byte("#!/bin/true\n")}})
	if err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	if err := ociimage.WriteLayout(otherDir, other); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, dir, want string }{
		{name: "no layout", dir: t.TempDir(), want: "is not an OCI image layout"},
		{name: "another image", dir: otherDir, want: `is "other", not the pinlab image`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := imagebuild.LayoutDigests(tt.dir, "linux/amd64")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LayoutDigests = %v, %v; want an error saying %q", got, err, tt.want)
			}
		})
	}
}

// TestBuildOutsideTheSource: outside the module, Build says where to run
// it before compiling anything.
func TestBuildOutsideTheSource(t *testing.T) {
	t.Chdir(t.TempDir())
	_, err := imagebuild.Build(t.Context(), imagebuild.Request{Image: imagebuild.Workload})
	if !errors.Is(err, imagebuild.ErrNoSource) || !strings.Contains(err.Error(), "in no Go module") {
		t.Fatalf("Build outside the module: %v, want ErrNoSource naming no module", err)
	}
}
