#!/usr/bin/env bash
# Builds CoreDNS (v1.15.0, only the plugins a kubeadm Corefile uses: see
# main.go) from the Go module proxy into a cache directory keyed by the
# version and a hash of this build module (go.mod, go.sum, main.go; not of
# this script: change the key by hand if a flag below changes); a no-op
# when that directory is complete. pinlab finds the newest complete
# directory for this version (internal/coredns).
#
#   build/coredns/build.sh          # prints the bin directory
#
# Cost on a 2-core machine: see NOTES.md (issue 16); instant when cached.
# Cache root: $PINLAB_CACHE, else $XDG_CACHE_HOME/pinlab, else ~/.cache/pinlab.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

coredns_version=v1.15.0
cache_root="${PINLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pinlab}"
hash=$(cat "$here"/go.mod "$here"/go.sum "$here"/main.go | sha256sum | cut -c1-12)
key="coredns-${coredns_version}-$(go env GOOS)-$(go env GOARCH)-${hash}"
bin="$cache_root/coredns/$key/bin"

if [ -x "$bin/coredns" ] && [ -e "$bin/.complete" ]; then
  echo "$bin"
  exit 0
fi

tmp="$cache_root/coredns/$key/bin.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$(date +%s)
echo "build.sh: building CoreDNS $coredns_version into $bin" >&2

# coremain prints this version (coredns -version); CoreDNS's Makefile sets
# GitCommit the same way.
ld="-s -w -X github.com/coredns/coredns/coremain.GitCommit=pinlab-build"
(cd "$here" && go build -trimpath -ldflags "$ld" -o "$tmp/coredns" .)
touch "$tmp/.complete"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
