package coredns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/pinlab/pinlab/internal/controlplane"
)

// Version is the CoreDNS release build/coredns/build.sh builds (a test
// reads the script to keep them equal).
const Version = "v1.15.0"

// BinEnv names the environment variable that, when set, is the directory
// BinDir returns (it must hold an executable coredns).
const BinEnv = "PINLAB_COREDNS_BIN"

// BuildCommand is how a user builds the binary, from a clone's root.
const BuildCommand = "build/coredns/build.sh"

// binary is the command's name in a bin directory.
const binary = "coredns"

// ErrNotBuilt marks BinDir's error when no binary is found; its message
// names the build command and its cost.
var ErrNotBuilt = errors.New("coredns: the CoreDNS binary is not built")

// BinDir returns the directory holding the coredns binary: $PINLAB_COREDNS_BIN
// if set, else the newest complete build of Version for this OS and
// architecture under controlplane.CacheRoot
// (CacheRoot/coredns/coredns-V-GOOS-GOARCH-HASH/bin with a .complete
// marker, as build.sh writes it; any HASH). The error wraps ErrNotBuilt
// when there is none.
func BinDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		if !executable(filepath.Join(d, binary)) {
			return "", fmt.Errorf("%w: %s=%s has no executable %s", ErrNotBuilt, BinEnv, d, binary)
		}
		return d, nil
	}
	root, err := controlplane.CacheRoot()
	if err != nil {
		return "", err
	}
	pattern := filepath.Join(root, "coredns", buildKeyPrefix()+"*", "bin")
	best, err := controlplane.NewestBuild(pattern, func(d string) bool { return executable(filepath.Join(d, binary)) })
	if err != nil {
		return "", fmt.Errorf("coredns: %w", err)
	}
	if best == "" {
		return "", fmt.Errorf("%w (none matches %s): run %s (about 2.5 min on 2 cores when the Go build cache already "+
			"holds the control plane's packages, more on a cold one; seconds when only relinking), or set %s",
			ErrNotBuilt, pattern, BuildCommand, BinEnv)
	}
	return best, nil
}

// buildKeyPrefix is build.sh's cache key without its hash.
func buildKeyPrefix() string {
	return fmt.Sprintf("coredns-%s-%s-%s-", Version, runtime.GOOS, runtime.GOARCH)
}

// executable reports whether path is a regular file with an execute bit.
func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
