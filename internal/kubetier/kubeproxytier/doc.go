// Package kubeproxytier holds the tests of the lab on a real control plane
// whose ClusterIPs the real kube-proxy serves (lab.API.Dataplane): one
// control plane started once in its own private network namespace, a
// separate test binary from package kubetier's, because kube-proxy's
// rules apply to the whole namespace and would take over the ClusterIPs
// pinlab's Proxier serves there. The lab runs the real dataplane,
// kube-proxy in nftables mode and the real CoreDNS as its cluster DNS; the
// iptables test replaces it with an iptables lab on the same control
// plane. Without the binaries (the control plane's, CoreDNS's), nft,
// iptables or conntrack the tests skip, unless
// PINLAB_REQUIRE_CONTROL_PLANE=1 (as in CI) makes them fail.
package kubeproxytier
