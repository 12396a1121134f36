#!/usr/bin/env bash
# Builds the CNI reference plugins the real control plane tier's per-pod
# network namespaces use (bridge, host-local, loopback from
# containernetworking/plugins, pinned in go.mod) from the Go module proxy
# into a cache directory keyed by a hash of this build module (go.mod,
# go.sum, tools.go; not of this script: change the key by hand if a flag
# below changes); a no-op when that directory is complete. pinlab finds the
# newest complete directory (internal/podnet).
#
#   build/cni/build.sh          # prints the bin directory
#
# Cost on a 2-core machine: see NOTES.md (issue 22); instant when cached.
# Cache root: $PINLAB_CACHE, else $XDG_CACHE_HOME/pinlab, else ~/.cache/pinlab.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

version=$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/containernetworking/plugins") print $(i+1)}' "$here/go.mod")
cache_root="${PINLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pinlab}"
hash=$(cat "$here"/go.mod "$here"/go.sum "$here"/tools.go | sha256sum | cut -c1-12)
key="cni-plugins-${version}-$(go env GOOS)-$(go env GOARCH)-${hash}"
bin="$cache_root/cni/$key/bin"
cmds=(bridge host-local loopback)

complete() {
  for c in "${cmds[@]}"; do [ -x "$bin/$c" ] || return 1; done
  [ -e "$bin/.complete" ]
}
if complete; then
  echo "$bin"
  exit 0
fi

tmp="$cache_root/cni/$key/bin.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$(date +%s)
echo "build.sh: building the CNI plugins $version into $bin" >&2
p=github.com/containernetworking/plugins/plugins
# CGO off: static binaries, as the plugins' own release builds.
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/" \
  $p/main/bridge $p/ipam/host-local $p/main/loopback)
touch "$tmp/.complete"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
