package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// goBuildFlags make the binary static and reproducible: no cgo (set in
// the environment), no file system paths (-trimpath), no symbol table,
// DWARF or build ID, and no VCS stamp (-buildvcs=false), so the bytes
// depend on the source and the toolchain only, not on where the tree is,
// whether it is a git checkout or whether it has untracked files.
var goBuildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid="}

// ReproducibleEnv pins the go command's settings that would otherwise
// come from the caller's environment and change the binary: no go.work
// (GOWORK), no GOFLAGS but -mod=readonly (no build tags, no module
// updates), the baseline instruction sets (GOAMD64, GOARM64, GOARM) and
// the release's default experiments (GOEXPERIMENT).
var ReproducibleEnv = []string{"GOWORK=off", "GOFLAGS=-mod=readonly", "GOAMD64=v1", "GOARM64=v8.0", "GOARM=7", "GOEXPERIMENT="}

// cancelGrace is how long a cancelled `go build` has, after SIGINT to its
// process group, before it is killed.
const cancelGrace = 10 * time.Second

// GoBuild cross-compiles the main package pkg once per platform, in the
// order given, with CGO_ENABLED=0 and goBuildFlags, and returns the
// binaries. A platform is "os/arch" in Go's terms, e.g. "linux/arm64";
// variants ("linux/arm/v7") are refused, since Binary has no field for
// them.
//
// It runs the go command found on PATH in the current directory, so it
// needs a Go toolchain and the module's source tree: pkg is what `go
// build` takes there, an import path or a "./dir" relative to the current
// directory. The environment is inherited apart from CGO_ENABLED, GOOS,
// GOARCH and ReproducibleEnv's settings, so what else the go command reads
// there (GOTOOLCHAIN: the Go release; GOPROXY, GOPATH) still applies.
// The builds run one at a
// time and each is bounded by ctx: when ctx ends, the go command and its
// compilers get SIGINT, then are killed after cancelGrace; the go command
// is killed too when the calling process dies. Everything a build writes
// (the binaries, the go command's work directory) is in one temporary
// directory, ociimage-gobuild-<pid>-*, removed at the end; one left by a
// process killed with -9 is removed by the next GoBuild.
func GoBuild(ctx context.Context, pkg string, platforms []string) ([]Binary, error) {
	if len(platforms) == 0 {
		return nil, fmt.Errorf("ociimage: go build %s: no platforms", pkg)
	}
	sweepStale(os.TempDir())
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tempPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("ociimage: go build %s: %w", pkg, err)
	}
	defer os.RemoveAll(dir)
	bins := make([]Binary, 0, len(platforms))
	for _, p := range platforms {
		b, err := goBuild(ctx, dir, pkg, p)
		if err != nil {
			return nil, err
		}
		bins = append(bins, b)
	}
	return bins, nil
}

// tempPrefix begins the name of GoBuild's temporary directory, followed
// by the building process's pid and a dash.
const tempPrefix = "ociimage-gobuild-"

// sweepStale removes the temporary directories in tmp of builds whose
// process is gone (killed before it could remove its own). Errors are
// ignored: a directory that cannot be removed stays, as before.
func sweepStale(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), tempPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(tmp, e.Name()))
		}
	}
}

func goBuild(ctx context.Context, dir, pkg, platform string) (Binary, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return Binary{}, fmt.Errorf("ociimage: go build %s: platform %q is not os/arch", pkg, platform)
	}
	out := filepath.Join(dir, goos+"-"+goarch)
	args := append([]string{"build"}, goBuildFlags...)
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, pkg)...)
	// GOTMPDIR puts the go command's own work directory in dir too, so
	// a build killed with -9 leaves one directory, which the next build
	// removes (sweepStale).
	cmd.Env = append(append(os.Environ(), ReproducibleEnv...), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOTMPDIR="+dir)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = cancelGrace
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return Binary{}, fmt.Errorf("ociimage: go build %s for %s: %w\n%s", pkg, platform, err, bytes.TrimSpace(output.Bytes()))
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return Binary{}, fmt.Errorf("ociimage: go build %s for %s: %w", pkg, platform, err)
	}
	return Binary{OS: goos, Arch: goarch, Data: data}, nil
}
