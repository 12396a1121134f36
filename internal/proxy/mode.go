package proxy

import "fmt"

// Mode is the kube-proxy dataplane a Proxier emulates, as kube-proxy's
// --proxy-mode flag (KubeProxyConfiguration.mode) selects it. It decides
// which endpoint a new connection gets; everything else (eligible endpoints,
// REJECT without endpoints, established connections kept, DNAT without SNAT)
// is the same in every mode.
type Mode string

const (
	// ModeIPTables is kube-proxy's default mode on Linux. A new connection
	// picks each eligible endpoint with probability exactly 1/n: the KUBE-SVC
	// chain holds one `-m statistic --mode random --probability 1/(n-i)` rule
	// per endpoint i (pkg/proxy/iptables/proxier.go).
	ModeIPTables Mode = "iptables"
	// ModeNFTables behaves exactly like ModeIPTables in the lab: the service
	// chain's `numgen random mod n vmap { 0 : goto <ep0>, ... }` is also a
	// uniform random pick per new connection (pkg/proxy/nftables/proxier.go,
	// writeServiceToEndpointRules). Its ClientIP affinity has no 100-client
	// cap (see Config.Mode).
	ModeNFTables Mode = "nftables"
	// ModeIPVS is ipvs mode with kube-proxy's default scheduler, rr: each
	// Service port is an IPVS virtual service whose new connections take its
	// real servers in turn (net/netfilter/ipvs/ip_vs_rr.c). See Config.Mode
	// for how the rotation follows endpoint changes.
	ModeIPVS Mode = "ipvs"
)

// DefaultMode is the Mode used when Config.Mode is empty.
const DefaultMode = ModeIPTables

// ParseMode returns the Mode named s: "iptables", "nftables" or "ipvs", or
// DefaultMode for "". Any other value is an error.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return DefaultMode, nil
	case ModeIPTables, ModeNFTables, ModeIPVS:
		return m, nil
	}
	return "", fmt.Errorf("proxy: unknown mode %q (want %q, %q or %q)", s, ModeIPTables, ModeNFTables, ModeIPVS)
}
