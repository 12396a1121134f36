#!/usr/bin/env bash
# Builds the real control plane tier's binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubectl) from the Go
# module proxy into a cache directory keyed by the versions and a hash of
# the two build modules (not of this script: change the key by hand if a
# flag below changes); a no-op when that directory is complete. pinlab finds
# the newest complete directory for these versions (internal/controlplane).
#
#   build/controlplane/build.sh          # prints the bin directory
#
# Cost on a 2-core machine: about 15-17 min and up to 3.1 GB of memory in the
# linker on a cold Go build cache (4-5 GB of GOCACHE, 1.4 GB of modules), about
# 5 min with a warm build cache, instant when the binaries are cached.
# Cache root: $PINLAB_CACHE, else $XDG_CACHE_HOME/pinlab, else ~/.cache/pinlab.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

k8s_version=v1.37.2
etcd_version=v3.6.16
cache_root="${PINLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pinlab}"
hash=$(cat "$here"/kubernetes/go.mod "$here"/kubernetes/go.sum "$here"/kubernetes/tools.go \
  "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/etcd/tools.go | sha256sum | cut -c1-12)
key="k8s-${k8s_version}-etcd-${etcd_version}-$(go env GOOS)-$(go env GOARCH)-${hash}"
bin="$cache_root/controlplane/$key/bin"
cmds=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl)

complete() {
  for c in "${cmds[@]}"; do [ -x "$bin/$c" ] || return 1; done
  [ -e "$bin/.complete" ]
}
if complete; then
  echo "$bin"
  exit 0
fi

tmp="$cache_root/controlplane/$key/bin.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$(date +%s)
echo "build.sh: building the control plane ($k8s_version, etcd $etcd_version) into $bin; cold: about 15-17 min" >&2

# The version ldflags make /version report the release (kubectl refuses
# v0.0.0-master); -s -w keep the binaries at about 400 MB in all.
minor=${k8s_version#v1.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
(cd "$here/kubernetes" && go build -trimpath -ldflags "$ld" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-proxy \
  k8s.io/kubernetes/cmd/kubectl)
touch "$tmp/.complete"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
