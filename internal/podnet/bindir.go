package podnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/pinlab/pinlab/internal/controlplane"
)

// Version is the containernetworking/plugins release build/cni pins.
const Version = "v1.10.0"

// BinEnv names a directory holding the plugins, overriding the build cache.
const BinEnv = "PINLAB_CNI_BIN"

// BuildCommand builds the plugins into the cache (seconds with a warm Go
// build cache, about a minute on a cold one).
const BuildCommand = "build/cni/build.sh"

// ErrNotBuilt is returned by BinDir when no build of the plugins is found.
var ErrNotBuilt = errors.New("podnet: the CNI plugins are not built")

// plugins are the CNI plugins a Network runs.
var plugins = []string{"bridge", "host-local", "loopback"}

// BinDir returns the directory of the CNI plugins: $PINLAB_CNI_BIN, else
// the newest complete build/cni/build.sh output for Version in pinlab's
// cache (controlplane.CacheRoot). The error wraps ErrNotBuilt and says the
// command to run.
func BinDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		if p := missing(d); p != "" {
			return "", fmt.Errorf("%w: %s=%s has no executable %s", ErrNotBuilt, BinEnv, d, p)
		}
		return d, nil
	}
	root, err := controlplane.CacheRoot()
	if err != nil {
		return "", err
	}
	pattern := filepath.Join(root, "cni", fmt.Sprintf("cni-plugins-%s-%s-%s-", Version, runtime.GOOS, runtime.GOARCH)+"*", "bin")
	best, err := controlplane.NewestBuild(pattern, func(d string) bool { return missing(d) == "" })
	if err != nil {
		return "", fmt.Errorf("podnet: %w", err)
	}
	if best == "" {
		return "", fmt.Errorf("%w (none matches %s): run %s (seconds with a warm Go build cache), or set %s",
			ErrNotBuilt, pattern, BuildCommand, BinEnv)
	}
	return best, nil
}

// missing returns the first plugin dir lacks as an executable, or "".
func missing(dir string) string {
	for _, p := range plugins {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return p
		}
	}
	return ""
}
