// Command krew packs pinlab as the kubectl plugin kubectl-pinlab for krew
// (https://krew.sigs.k8s.io): it cross-builds ./cmd/pinlab per platform
// (CGO_ENABLED=0, -trimpath), packs each binary into a reproducible
// .tar.gz and writes the krew plugin manifest pinlab.yaml beside them.
//
//	go run ./build/krew -version v0.3.0 -base-url https://github.com/pinlab/pinlab/releases/download/v0.3.0 -out dist
//
// See deploy/krew/README.md.
package main

import (
	"archive/tar"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// defaultPlatforms are the -platforms built when the flag is not given.
const defaultPlatforms = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64"

// options are the command's flags.
type options struct {
	// version is the release, semver with krew's required "v" prefix.
	version string
	// baseURL is where the archives are downloaded from: each platform's
	// uri is baseURL/ARCHIVE.
	baseURL string
	// out is the directory the archives and pinlab.yaml are written to;
	// it is created if need be.
	out string
	// platforms are the os/arch pairs to build, in the manifest's order.
	platforms []platform
	// root is the module root that holds cmd/pinlab (and LICENSE);
	// empty: the current directory's module, as `go env GOMOD` says.
	root string
	// pkg is the main package built, relative to root; empty means
	// ./cmd/pinlab (tests build a smaller one).
	pkg string
}

// platform is a GOOS/GOARCH pair, krew's os and arch labels.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "krew: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// semver is krew's version syntax: "v", then MAJOR.MINOR.PATCH, then an
// optional pre-release and build metadata.
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// parseFlags parses args; errors are printed on stderr with the usage.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("krew", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var platforms string
	fs.StringVar(&o.version, "version", "", "release version, e.g. v0.3.0 (required; krew needs the v)")
	fs.StringVar(&o.baseURL, "base-url", "", "URL the archives will be downloaded from, without the archive's name (required)")
	fs.StringVar(&o.out, "out", "", "directory to write the archives and pinlab.yaml to (required)")
	fs.StringVar(&platforms, "platforms", defaultPlatforms, "comma-separated os/arch pairs to build")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	err := o.check(fs.Args())
	if err == nil {
		o.platforms, err = parsePlatforms(platforms)
	}
	if err != nil {
		fmt.Fprintf(stderr, "krew: %v\n", err)
		fs.Usage()
	}
	return o, err
}

// check says what is missing or wrong in o's required flags.
func (o options) check(rest []string) error {
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected arguments %q", rest)
	case o.version == "" || o.baseURL == "" || o.out == "":
		return errors.New("-version, -base-url and -out are required")
	case !semver.MatchString(o.version):
		return fmt.Errorf("-version %q is not vMAJOR.MINOR.PATCH (krew needs semver with a leading v)", o.version)
	case !strings.HasPrefix(o.baseURL, "https://") && !strings.HasPrefix(o.baseURL, "http://"):
		return fmt.Errorf("-base-url %q is not an http(s) URL", o.baseURL)
	}
	return nil
}

// parsePlatforms parses "os/arch,os/arch".
func parsePlatforms(s string) ([]platform, error) {
	var out []platform
	seen := map[platform]bool{}
	for _, f := range strings.Split(s, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(f), "/")
		p := platform{goos, goarch}
		if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			return nil, fmt.Errorf("-platforms: %q is not os/arch", f)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// run builds, packs and writes the manifest, and prints what it wrote.
func run(ctx context.Context, o options, stdout io.Writer) error {
	root, err := moduleRoot(ctx, o.root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "pinlab-krew-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	m := newManifest(o.version)
	for _, p := range o.platforms {
		pl, err := release(ctx, o, root, filepath.Join(tmp, p.os+"_"+p.arch), p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		m.Spec.Platforms = append(m.Spec.Platforms, pl)
		fmt.Fprintf(stdout, "%s  %s\n", pl.Sha256, filepath.Join(o.out, path.Base(pl.URI)))
	}
	file := filepath.Join(o.out, pluginName+".yaml")
	if err := writeManifest(file, m); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", file)
	return nil
}

// release builds and packs one platform into o.out and returns its
// manifest entry.
func release(ctx context.Context, o options, root, dir string, p platform) (manifestPlatform, error) {
	bin := binName(p)
	if err := goBuild(ctx, root, cmp.Or(o.pkg, "./cmd/pinlab"), filepath.Join(dir, bin), p); err != nil {
		return manifestPlatform{}, err
	}
	files := []archiveFile{{name: bin, path: filepath.Join(dir, bin), mode: 0o755}}
	ops := []fileOp{{From: bin, To: "."}}
	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err == nil {
		files = append(files, archiveFile{name: "LICENSE", path: filepath.Join(root, "LICENSE"), mode: 0o644})
		ops = append(ops, fileOp{From: "LICENSE", To: "."})
	}
	name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", binBase, o.version, p.os, p.arch)
	sum, err := writeArchive(filepath.Join(o.out, name), files)
	if err != nil {
		return manifestPlatform{}, err
	}
	return manifestPlatform{
		Selector: selector{MatchLabels: map[string]string{"os": p.os, "arch": p.arch}},
		URI:      strings.TrimSuffix(o.baseURL, "/") + "/" + name,
		Sha256:   sum,
		Files:    ops,
		Bin:      bin,
	}, nil
}

// binBase is the plugin's executable name: kubectl runs kubectl-pinlab
// for `kubectl pinlab`.
const binBase = "kubectl-" + pluginName

// binName is the executable's name on p.
func binName(p platform) string {
	if p.os == "windows" {
		return binBase + ".exe"
	}
	return binBase
}

// moduleRoot returns root, or when it is empty the directory of the
// current module's go.mod.
func moduleRoot(ctx context.Context, root string) (string, error) {
	if root != "" {
		return root, nil
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run from the pinlab repository")
	}
	return filepath.Dir(mod), nil
}

// goBuild cross-builds root's main package pkg for p into bin, statically
// (CGO_ENABLED=0), with -trimpath and without VCS stamping, so that the
// same source and toolchain give the same bytes wherever they are built
// (whatever the checkout's state).
func goBuild(ctx context.Context, root, pkg, bin string, p platform) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.os, "GOARCH="+p.arch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return nil
}

// archiveTime is every archive entry's modification time, so that the
// archives depend on the files' contents only.
var archiveTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// archiveFile is one file to pack: name in the archive, path on disk.
type archiveFile struct {
	name, path string
	mode       int64
}

// writeArchive packs files into a reproducible .tar.gz at file, and
// returns its sha256 in hex: entries sorted by name, owned by 0:0 with
// no user or group names, modified at archiveTime, in USTAR format;
// gzip with no name and no time in its header.
func writeArchive(file string, files []archiveFile) (string, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b archiveFile) int { return strings.Compare(a.name, b.name) })
	f, err := os.Create(file)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	err = packTo(io.MultiWriter(f, h), files)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(file)
		return "", fmt.Errorf("%s: %w", file, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// packTo writes files, in order, as a gzipped tar to w.
func packTo(w io.Writer, files []archiveFile) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, af := range files {
		if err := addFile(tw, af); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// addFile writes af's header and contents to tw.
func addFile(tw *tar.Writer, af archiveFile) error {
	f, err := os.Open(af.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: af.name, Mode: af.mode, Size: st.Size(), ModTime: archiveTime, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// pluginName is the plugin's krew name: `kubectl krew install pinlab`.
const pluginName = "pinlab"

// The manifest's schema is krew's index.Plugin
// (sigs.k8s.io/krew/pkg/index/types.go), apiVersion
// krew.googlecontainertools.github.com/v1alpha2, as its validation
// (internal/index/validation) checks it: a semver version with a v, a
// one-line shortDescription, and per platform an os/arch selector, uri,
// sha256 and bin; files may be left out in krew v0.4, but older krews
// require them, so they are given.
type manifest struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Metadata   metadata     `yaml:"metadata"`
	Spec       manifestSpec `yaml:"spec"`
}

type metadata struct {
	Name string `yaml:"name"`
}

type manifestSpec struct {
	Version          string             `yaml:"version"`
	Homepage         string             `yaml:"homepage"`
	ShortDescription string             `yaml:"shortDescription"`
	Description      string             `yaml:"description"`
	Caveats          string             `yaml:"caveats,omitempty"`
	Platforms        []manifestPlatform `yaml:"platforms"`
}

type manifestPlatform struct {
	Selector selector `yaml:"selector"`
	URI      string   `yaml:"uri"`
	Sha256   string   `yaml:"sha256"`
	Files    []fileOp `yaml:"files"`
	Bin      string   `yaml:"bin"`
}

type selector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type fileOp struct {
	From string `yaml:"from"`
	To   string `yaml:"to"`
}

// newManifest returns pinlab's manifest for version, without platforms.
func newManifest(version string) manifest {
	return manifest{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   metadata{Name: pluginName},
		Spec: manifestSpec{
			Version:          version,
			Homepage:         "https://github.com/pinlab/pinlab",
			ShortDescription: "Tell whether a Service's gRPC traffic is pinned to a few pods, and why",
			Description: `kubectl pinlab diagnose SERVICE -n NAMESPACE tells whether a Service's gRPC
calls are pinned to a few of its pods (each client's one long-lived HTTP/2
connection stays on the pod kube-proxy picked when it opened) or balanced.
It compares per-pod request rates, counts the connections each client
holds and to which pods, and looks for an L7 proxy in the path; then it
gives the cause, the figures, the fixes with their trade-offs and the
pinlab lab scenario that reproduces it. It reads the cluster through your
kubeconfig, as kubectl does, and reaches the pods through the API server's
port-forward.
`,
			Caveats: `kubectl pinlab diagnose needs RBAC in the Service's namespace to list
Services, EndpointSlices and pods and to port-forward to pods; for servers
without channelz, to add its agent as an ephemeral container and read its
log. The repository's deploy/rbac/diagnose.yaml is a least-privilege
ClusterRole for it, with an example RoleBinding.
`,
		},
	}
}

// writeManifest writes m as YAML to file.
func writeManifest(file string, m manifest) error {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(m); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}
