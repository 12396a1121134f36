package kubeproxy

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Rule is one ClusterIP port as the kernel holds it: the VIP and the
// endpoints a new connection is DNATed to (what kube-proxy programmed,
// read back from the kernel, not from the API).
type Rule struct {
	VIP netip.AddrPort
	// Chain is the service chain's name (service-HASH-ns/name/tcp/port in
	// nftables mode, KUBE-SVC-HASH in iptables mode).
	Chain string
	// Endpoints are the DNAT targets, sorted; empty when the Service has
	// no ready endpoint (kube-proxy then rejects new connections).
	Endpoints []netip.AddrPort
}

// Rules reads kube-proxy's TCP ClusterIP rules from the kernel: `nft list
// table ip kube-proxy` in nftables mode, `iptables-save -t nat` in
// iptables mode. Sorted by VIP.
func (k *KubeProxy) Rules(ctx context.Context) ([]Rule, error) {
	name, args, parse := "nft", []string{"list", "table", "ip", "kube-proxy"}, ParseNFT
	if k.cfg.Mode == ModeIPTables {
		name, args, parse = "iptables-save", []string{"-t", "nat"}, ParseIPTablesSave
	}
	path, err := LookPath(name)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("kubeproxy: %s %s: %w", name, strings.Join(args, " "), err)
	}
	return parse(string(out))
}

var (
	// A service-ips map element: "10.96.0.1 . tcp . 443 : goto CHAIN".
	nftService = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+) \. tcp \. (\d+) : goto ([^\s,}]+)`)
	// A goto or jump to an endpoint chain.
	nftEndpoint = regexp.MustCompile(`goto (endpoint-[^\s,}]+)`)
	// An endpoint chain's DNAT.
	nftDNAT = regexp.MustCompile(`dnat (?:ip )?to (\d+\.\d+\.\d+\.\d+:\d+)`)
	// A service chain's inline DNAT map:
	// "dnat ip to numgen random mod 2 map { 0 : 10.244.0.2 . 8080, ... }".
	nftInline   = regexp.MustCompile(`dnat ip to numgen random mod \d+ map \{([^}]*)\}`)
	nftInlineEP = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+) \. (\d+)`)
)

// ParseNFT reads the TCP ClusterIP rules from the text of `nft list table
// ip kube-proxy` (kube-proxy's nftables mode, v1.31 and later): the
// service-ips map sends VIP . tcp . port to a service chain, which either
// DNATs itself (`dnat ip to numgen random mod N map { 0 : IP . port, ...
// }`, what v1.37 writes for plain endpoints; `dnat to IP:port` for a
// single one) or jumps by `numgen random mod N vmap` to endpoint chains,
// each ending in a DNAT.
func ParseNFT(text string) ([]Rule, error) {
	chains := nftChains(text)
	services, ok := chains["map service-ips"]
	if !ok {
		return nil, nil // not synced yet
	}
	var rules []Rule
	for _, m := range nftService.FindAllStringSubmatch(services, -1) {
		vip, err := addrPort(m[1], m[2])
		if err != nil {
			return nil, err
		}
		r := Rule{VIP: vip, Chain: m[3]}
		body := chains["chain "+m[3]]
		if in := nftInline.FindStringSubmatch(body); in != nil {
			for _, e := range nftInlineEP.FindAllStringSubmatch(in[1], -1) {
				ep, err := addrPort(e[1], e[2])
				if err != nil {
					return nil, err
				}
				r.Endpoints = append(r.Endpoints, ep)
			}
		}
		if d := nftDNAT.FindStringSubmatch(body); d != nil {
			// One endpoint: the service chain DNATs to it itself.
			ep, err := netip.ParseAddrPort(d[1])
			if err != nil {
				return nil, fmt.Errorf("kubeproxy: nft: %w", err)
			}
			r.Endpoints = append(r.Endpoints, ep)
		}
		for _, e := range nftEndpoint.FindAllStringSubmatch(body, -1) {
			d := nftDNAT.FindStringSubmatch(chains["chain "+e[1]])
			if d == nil {
				return nil, fmt.Errorf("kubeproxy: nft: endpoint chain %s has no DNAT", e[1])
			}
			ep, err := netip.ParseAddrPort(d[1])
			if err != nil {
				return nil, fmt.Errorf("kubeproxy: nft: %w", err)
			}
			r.Endpoints = append(r.Endpoints, ep)
		}
		rules = append(rules, sorted(r))
	}
	return sortRules(rules), nil
}

// nftChains splits nft's listing into its chains' and maps' bodies,
// keyed "chain NAME" and "map NAME".
func nftChains(text string) map[string]string {
	out := map[string]string{}
	var key string
	var body strings.Builder
	depth := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if depth == 1 && (strings.HasPrefix(line, "chain ") || strings.HasPrefix(line, "map ")) && strings.HasSuffix(line, "{") {
			key = strings.TrimSpace(strings.TrimSuffix(line, "{"))
			body.Reset()
		} else if depth >= 2 {
			body.WriteString(line + "\n")
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth == 1 && key != "" {
			out[key] = body.String()
			key = ""
		}
	}
	return out
}

var (
	// -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp ... --dport 443 -j KUBE-SVC-X
	iptService = regexp.MustCompile(`^-A KUBE-SERVICES -d (\d+\.\d+\.\d+\.\d+)/32 -p tcp .*--dport (\d+) -j (KUBE-SVC-\S+)`)
	// -A KUBE-SVC-X ... -j KUBE-SEP-Y
	iptJump = regexp.MustCompile(`^-A (KUBE-SVC-\S+) .*-j (KUBE-SEP-\S+)`)
	// -A KUBE-SEP-Y ... -j DNAT --to-destination 10.244.0.2:8080
	iptDNAT = regexp.MustCompile(`^-A (KUBE-SEP-\S+) .*-j DNAT --to-destination (\d+\.\d+\.\d+\.\d+:\d+)`)
)

// ParseIPTablesSave reads the TCP ClusterIP rules from the text of
// `iptables-save -t nat` (kube-proxy's iptables mode): KUBE-SERVICES sends
// VIP:port to a KUBE-SVC chain, which jumps to KUBE-SEP chains (by
// `-m statistic --mode random`), each a DNAT.
func ParseIPTablesSave(text string) ([]Rule, error) {
	var order []string
	vips := map[string]netip.AddrPort{}
	seps := map[string][]string{}
	dnat := map[string]netip.AddrPort{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := iptService.FindStringSubmatch(line); m != nil {
			vip, err := addrPort(m[1], m[2])
			if err != nil {
				return nil, err
			}
			if _, ok := vips[m[3]]; !ok {
				order = append(order, m[3])
			}
			vips[m[3]] = vip
		} else if m := iptJump.FindStringSubmatch(line); m != nil {
			seps[m[1]] = append(seps[m[1]], m[2])
		} else if m := iptDNAT.FindStringSubmatch(line); m != nil {
			ep, err := netip.ParseAddrPort(m[2])
			if err != nil {
				return nil, fmt.Errorf("kubeproxy: iptables-save: %w", err)
			}
			dnat[m[1]] = ep
		}
	}
	var rules []Rule
	for _, svc := range order {
		r := Rule{VIP: vips[svc], Chain: svc}
		for _, sep := range seps[svc] {
			ep, ok := dnat[sep]
			if !ok {
				return nil, fmt.Errorf("kubeproxy: iptables-save: %s has no DNAT", sep)
			}
			r.Endpoints = append(r.Endpoints, ep)
		}
		rules = append(rules, sorted(r))
	}
	return sortRules(rules), nil
}

func addrPort(ip, port string) (netip.AddrPort, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("kubeproxy: %w", err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("kubeproxy: port %q: %w", port, err)
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

func sorted(r Rule) Rule {
	slices.SortFunc(r.Endpoints, netip.AddrPort.Compare)
	r.Endpoints = slices.Compact(r.Endpoints)
	return r
}

func sortRules(rs []Rule) []Rule {
	slices.SortFunc(rs, func(a, b Rule) int { return a.VIP.Compare(b.VIP) })
	return rs
}
