package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// The versions build/controlplane/build.sh builds (a test reads the
// script to keep them equal).
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.6.16"
)

// BinEnv names the environment variable that, when set, is the directory
// BinDir returns (it must hold every command in Commands).
const BinEnv = "PINLAB_CONTROL_PLANE_BIN"

// Commands are the binaries a control plane bin directory holds.
var Commands = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl"}

// ErrNotBuilt marks BinDir's error when no binaries are found; its message
// names the build command and its cost.
var ErrNotBuilt = errors.New("controlplane: the control plane binaries are not built")

// BuildCommand is how a user builds the binaries, from a clone's root.
const BuildCommand = "build/controlplane/build.sh"

// CacheRoot returns where build.sh caches builds: $PINLAB_CACHE, else
// $XDG_CACHE_HOME/pinlab, else ~/.cache/pinlab.
func CacheRoot() (string, error) {
	if d := os.Getenv("PINLAB_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "pinlab"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("controlplane: no cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "pinlab"), nil
}

// BinDir returns the directory holding the control plane's binaries:
// $PINLAB_CONTROL_PLANE_BIN if set, else the newest complete build of
// KubernetesVersion and EtcdVersion for this OS and architecture under
// CacheRoot (CacheRoot/controlplane/k8s-V-etcd-V-GOOS-GOARCH-HASH/bin with
// a .complete marker, as build.sh writes it; any HASH). The error wraps
// ErrNotBuilt when there is none.
func BinDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		if missing := missingCommands(d); len(missing) > 0 {
			return "", fmt.Errorf("%w: %s=%s lacks %v", ErrNotBuilt, BinEnv, d, missing)
		}
		return d, nil
	}
	root, err := CacheRoot()
	if err != nil {
		return "", err
	}
	pattern := filepath.Join(root, "controlplane", buildKeyPrefix()+"*", "bin")
	best, err := NewestBuild(pattern, func(d string) bool { return len(missingCommands(d)) == 0 })
	if err != nil {
		return "", fmt.Errorf("controlplane: %w", err)
	}
	if best == "" {
		return "", fmt.Errorf("%w (none matches %s): run %s (cold: about 15-17 min and up to 3 GB of memory on 2 cores; "+
			"under a minute when the Go build cache is warm), or set %s", ErrNotBuilt, pattern, BuildCommand, BinEnv)
	}
	return best, nil
}

// NewestBuild returns, of the directories matching pattern (a
// filepath.Glob pattern), the one whose .complete marker (as the build
// scripts write it last) is newest among those for which complete is
// true; "" when there is none. Its error is a malformed pattern's.
func NewestBuild(pattern string, complete func(dir string) bool) (string, error) {
	dirs, err := filepath.Glob(pattern)
	if err != nil {
		return "", err
	}
	var best string
	var bestTime time.Time
	for _, d := range dirs {
		st, err := os.Stat(filepath.Join(d, ".complete"))
		if err != nil || !complete(d) {
			continue
		}
		if best == "" || st.ModTime().After(bestTime) {
			best, bestTime = d, st.ModTime()
		}
	}
	return best, nil
}

// buildKeyPrefix is build.sh's cache key without its hash.
func buildKeyPrefix() string {
	return fmt.Sprintf("k8s-%s-etcd-%s-%s-%s-", KubernetesVersion, EtcdVersion, runtime.GOOS, runtime.GOARCH)
}

// missingCommands returns the Commands that dir lacks as executables.
func missingCommands(dir string) []string {
	var missing []string
	for _, c := range Commands {
		st, err := os.Stat(filepath.Join(dir, c))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, c)
		}
	}
	return missing
}
