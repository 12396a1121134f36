package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/conntrack"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/kubeproxy"
)

// Dataplane names what serves a lab's ClusterIPs and its cluster DNS
// (API.Dataplane; the embedded control plane always runs pinlab's).
type Dataplane string

const (
	// DataplanePinlab is pinlab's kube-proxy emulation (package proxy), a
	// user-space relay listening on every ClusterIP port; "" means it too.
	DataplanePinlab Dataplane = "pinlab"
	// DataplaneKubeProxyNFTables is the real kube-proxy in nftables mode
	// (package kubeproxy): the kernel DNATs each new connection.
	DataplaneKubeProxyNFTables Dataplane = "kube-proxy-nftables"
	// DataplaneKubeProxyIPTables is the real kube-proxy in iptables mode,
	// through Debian's iptables (its nf_tables backend, iptables-nft).
	DataplaneKubeProxyIPTables Dataplane = "kube-proxy-iptables"
)

// Dataplanes lists the dataplanes, the default first.
var Dataplanes = []Dataplane{DataplanePinlab, DataplaneKubeProxyNFTables, DataplaneKubeProxyIPTables}

// ParseDataplane returns the Dataplane named s ("" is DataplanePinlab).
func ParseDataplane(s string) (Dataplane, error) {
	if s == "" {
		return DataplanePinlab, nil
	}
	if d := Dataplane(s); slices.Contains(Dataplanes, d) {
		return d, nil
	}
	return "", fmt.Errorf("dataplane %q: expected %s", s, joinDataplanes())
}

func joinDataplanes() string {
	var names []string
	for _, d := range Dataplanes {
		names = append(names, string(d))
	}
	return strings.Join(names, ", ")
}

// KubeProxyMode is the real kube-proxy's mode for d; "" for pinlab's.
func (d Dataplane) KubeProxyMode() kubeproxy.Mode {
	switch d {
	case DataplaneKubeProxyNFTables:
		return kubeproxy.ModeNFTables
	case DataplaneKubeProxyIPTables:
		return kubeproxy.ModeIPTables
	}
	return ""
}

// Check reports whether d can run here: the tools its mode needs (nft,
// or iptables, iptables-save and iptables-restore), conntrack, for the
// lab's connection table, and the CoreDNS binary (build/coredns/build.sh)
// with its dnstap plugin, the cluster DNS beside the real kube-proxy.
func (d Dataplane) Check() error {
	mode := d.KubeProxyMode()
	if mode == "" {
		return nil
	}
	if err := kubeproxy.Available(mode); err != nil {
		return err
	}
	if _, err := conntrack.Command(); err != nil {
		return err
	}
	dir, err := coredns.BinDir()
	if err != nil {
		return err
	}
	return coredns.CheckDnstap(dir)
}

// dataplane serves the lab's ClusterIPs and its cluster DNS from the API's
// objects, as kube-proxy and CoreDNS serve a node. Start picks one
// implementation, once (newDataplane), and nothing else in the lab asks
// which it has, as kube-proxy keeps its iptables, ipvs and nftables
// proxiers behind one Provider:
//
//   - pinlabDataplane (DataplanePinlab): package proxy's kube-proxy
//     emulation, a relay on each ClusterIP port, and package clusterdns's
//     DNS server, both in this process;
//   - kernelDataplane (DataplaneKubeProxyNFTables, ...IPTables): the real
//     kube-proxy programming the kernel, the real CoreDNS, and conntrack's
//     view of the connections the kernel DNATs; on a real control plane
//     only (Config.API).
//
// An implementation is built before the informers start (so that it can
// register its own) and started once they have synced and the lab's
// controllers and kubelet run. Its goroutines and processes are the lab's:
// it starts them with l.goRun and watches them with l.watchExit, so that
// their failure fails the lab.
type dataplane interface {
	// start starts serving; it returns once the cluster DNS answers and
	// the proxy runs (its rules may still be catching up: see served).
	start(ctx context.Context, l *Lab) error
	// dnsAddr is the cluster DNS's "IP:port".
	dnsAddr() string
	// served returns, per ClusterIP:port, how many endpoints new
	// connections go to and whether they are accepted, as the proxy or
	// the kernel holds them now: what WaitReady compares with the
	// EndpointSlices.
	served() (map[netip.AddrPort]servedVIP, error)
	// syncQueryLog returns once every answer the DNS sent before the call
	// has reached the query log (Config.DNS.QueryLog).
	syncQueryLog(ctx context.Context) error
	// stop stops the cluster DNS and what start started outside the lab's
	// goroutines; the rest ends with the lab's run context.
	stop(ctx context.Context) error
	// logs names the log file of each of the dataplane's processes by
	// component ("kube-proxy", "CoreDNS"); none for pinlab's.
	logs() map[string]string
}

// servedVIP is one ClusterIP port as the dataplane serves it.
type servedVIP struct {
	endpoints int
	accepting bool
}

// newDataplane builds cfg's dataplane on c, its DNS at dns: the one place
// that chooses between them.
func newDataplane(cfg Config, c *cluster.Cluster, dns netip.AddrPort) (dataplane, Dataplane, error) {
	if cfg.API == nil || cfg.API.Dataplane.KubeProxyMode() == "" {
		dp, err := newPinlabDataplane(cfg, c, dns)
		return dp, DataplanePinlab, err
	}
	dp, err := newKernelDataplane(cfg, dns)
	return dp, cfg.API.Dataplane, err
}
