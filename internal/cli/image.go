package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/imagebuild"
)

func newCmdImage(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the pinlab image that a real cluster's pods run",
	}
	groupCmd(cmd)
	cmd.AddCommand(NewCmdImageBuild(stdout, stderr))
	return cmd
}

// ImageBuildOptions are `pinlab image build`'s flags.
type ImageBuildOptions struct {
	Platforms []string
	Layout    string
	Push      string
	Out       io.Writer
}

// NewCmdImageBuild returns `pinlab image build`.
func NewCmdImageBuild(stdout, _ io.Writer) *cobra.Command {
	o := &ImageBuildOptions{Out: stdout}
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the pinlab image (pods and load clients) without a container engine",
		Long: `Build the OCI image of pinlab's workload: the pods' gRPC, HTTP and metrics
servers, as the lab's pods run them, and the load client, for the platforms
given (docs/image.md says what the image runs). It compiles
cmd/pinlab-workload with the go command, so run it inside a pinlab checkout
with Go installed; no Docker daemon or other container engine is used. The
binary is static, at /pinlab on an empty base, running as 65532:65532; the
same source and Go release give the same digest.

It prints the index digest and each platform's compressed size. --oci-layout
writes the index to a directory (for crane, skopeo or oras); --push uploads
it with the credentials of your Docker config (~/.docker/config.json and its
credential helpers) and prints the reference to pin it by.`,
		Example: `  pinlab image build
  pinlab image build --push ghcr.io/acme/pinlab:dev
  pinlab image build --platforms linux/amd64 --oci-layout ./pinlab-image`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exit.UsageError(fmt.Errorf("%s takes no arguments, got %q", c.CommandPath(), args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return exit.UsageError(err)
			}
			return imageBuild(cmd, o)
		},
	}
	cmd.Flags().StringSliceVar(&o.Platforms, "platforms", imagebuild.Platforms, "os/arch pairs to build, comma-separated")
	cmd.Flags().StringVar(&o.Layout, "oci-layout", "", "write the image as an OCI image layout to this directory")
	cmd.Flags().StringVar(&o.Push, "push", "", "push the image to this reference, e.g. ghcr.io/acme/pinlab:dev")
	return cmd
}

// linuxArches are the GOARCH values Go builds linux binaries for (`go
// tool dist list`, Go 1.26).
var linuxArches = []string{"386", "amd64", "arm", "arm64", "loong64", "mips", "mips64", "mips64le", "mipsle", "ppc64", "ppc64le", "riscv64", "s390x"}

// validate checks the flags before anything is compiled.
func (o *ImageBuildOptions) validate() error {
	seen := map[string]bool{}
	for _, p := range o.Platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" || !slices.Contains(linuxArches, goarch) {
			return fmt.Errorf("--platforms: %q is not linux/ARCH with ARCH one of %s", p, strings.Join(linuxArches, ", "))
		}
		if seen[p] {
			return fmt.Errorf("--platforms: %s is given twice", p)
		}
		seen[p] = true
	}
	if len(o.Platforms) == 0 {
		return fmt.Errorf("--platforms: give at least one, e.g. linux/amd64")
	}
	if o.Push != "" {
		ref, err := name.ParseReference(o.Push)
		if err != nil {
			return fmt.Errorf("--push %q: %v", o.Push, err)
		}
		if _, ok := ref.(name.Digest); ok {
			return fmt.Errorf("--push %q: give a repository and tag (REPOSITORY[:TAG]); the digest is the image's, printed once pushed", o.Push)
		}
	}
	if o.Layout != "" {
		if err := writableDir(o.Layout); err != nil {
			return fmt.Errorf("--oci-layout %s: %v", o.Layout, err)
		}
	}
	return nil
}

// writableDir makes dir if missing and checks that a file can be written
// there, before anything is compiled.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".pinlab-check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

func imageBuild(cmd *cobra.Command, o *ImageBuildOptions) error {
	fmt.Fprintf(o.Out, "building %s for %s ...\n", imagebuild.Workload.Spec.Name, strings.Join(o.Platforms, ", "))
	res, err := imagebuild.Build(cmd.Context(), imagebuild.Request{Image: imagebuild.Workload, Platforms: o.Platforms, Layout: o.Layout, Push: o.Push})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "index %s\n", res.Digest)
	for _, p := range slices.Sorted(maps.Keys(res.Sizes)) {
		fmt.Fprintf(o.Out, "  %-12s %5.1f MB compressed\n", p, float64(res.Sizes[p])/1e6)
	}
	if o.Layout != "" {
		fmt.Fprintf(o.Out, "wrote OCI layout %s\n", o.Layout)
	}
	if res.Pushed != "" {
		fmt.Fprintf(o.Out, "pushed %s\n", res.Pushed)
	}
	return nil
}
