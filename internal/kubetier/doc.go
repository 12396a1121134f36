// Package kubetier holds the tests of the lab on a real control plane
// (etcd, kube-apiserver, kube-controller-manager and kube-scheduler built
// by build/controlplane/build.sh): one control plane and one lab over it,
// started once inside a private network namespace and shared, each test in
// its own namespace. Without the binaries the tests skip, unless
// PINLAB_REQUIRE_CONTROL_PLANE=1 (as in CI) makes them fail.
package kubetier
