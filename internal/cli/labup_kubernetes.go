package cli

import (
	"fmt"
	"io"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/labrun"
	"github.com/pinlab/pinlab/internal/labup"
)

// The control planes lab up and lab run run on (--control-plane).
const (
	controlPlaneEmbedded   = labrun.ControlPlaneEmbedded
	controlPlaneKubernetes = labrun.ControlPlaneKubernetes
)

// dataplaneUsage is --dataplane's help, on lab up and lab run.
const dataplaneUsage = "with --control-plane kubernetes: what serves ClusterIPs and the cluster DNS: pinlab (its kube-proxy emulation and its DNS), or kube-proxy-nftables or kube-proxy-iptables (the real dataplane: the real kube-proxy, built with the control plane, and the real CoreDNS, built by build/coredns/build.sh; needs Debian's nftables or iptables, and conntrack)"

// checkDataplane checks --dataplane; its errors are usage errors.
func checkDataplane(name string, set bool, controlPlane string) error {
	if err := labrun.CheckDataplane(name, set, controlPlane); err != nil {
		return exit.UsageError(err)
	}
	return nil
}

// checkPodNetwork checks --pod-network; its errors are usage errors.
func checkPodNetwork(name string, set bool, controlPlane string) error {
	if err := labrun.CheckPodNetwork(name, set, controlPlane); err != nil {
		return exit.UsageError(err)
	}
	return nil
}

// podNetworkUsage is --pod-network's help.
const podNetworkUsage = "with --control-plane kubernetes: shared (every pod in the lab's network namespace, its address local on lo) or netns (a network namespace per pod on a bridge, set up by the CNI plugins; build them first with build/cni/build.sh)"

// printKube tells how to reach a lab on a real control plane from the
// host: kubectl with the kubeconfig, and lab exec for what only the
// namespace can reach.
func printKube(w io.Writer, r labup.Ready, prog, ctl string) {
	fmt.Fprintf(w, "\ndataplane: %s\n", dataplaneLine(r))
	if r.Kube.PodNetwork == "netns" {
		fmt.Fprintf(w, "pod network: netns (each pod in its own network namespace on a bridge, set up by the CNI plugins)\n")
	} else {
		fmt.Fprintf(w, "pod network: shared (every pod in the lab's network namespace; --pod-network netns gives each its own)\n")
	}
	fmt.Fprintf(w, "\nKubernetes API (kube-apiserver %s) for kubectl:\n", r.Kube.Version)
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", r.Kube.Kubeconfig)
	fmt.Fprintf(w, "  %s get pods -o wide -A\n", r.Kube.Kubectl)
	fmt.Fprintf(w, "pod IPs, ClusterIPs and the cluster DNS are reachable only inside the lab's network namespace:\n")
	fmt.Fprintf(w, "  %s lab exec%s -- CMD ARGS...\n", prog, ctl)
}

// dataplaneLine says what serves the lab's ClusterIPs, for lab up.
func dataplaneLine(r labup.Ready) string {
	dp := r.Dataplane
	if !r.RealDataplane {
		return "pinlab (its kube-proxy emulation, a relay on each ClusterIP port)"
	}
	return fmt.Sprintf("%s (the real kube-proxy %s in %s mode, log %s; the cluster DNS is CoreDNS %s, at %s, kube-dns's endpoint, log %s); dial ClusterIPs from pod addresses, other sources are masqueraded and fail on lo",
		dp, r.Kube.Version, r.KubeProxyMode, r.DataplaneLogs["kube-proxy"], r.CoreDNSVersion, r.DNS, r.DataplaneLogs["CoreDNS"])
}
