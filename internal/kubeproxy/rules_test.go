package kubeproxy

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func aps(s ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range s {
		out = append(out, netip.MustParseAddrPort(a))
	}
	return out
}

// endpointChains is nftables mode's other shape: the service chain jumps
// to endpoint chains (v1.31-1.36, and v1.37 when an endpoint needs its own
// chain), each with its DNAT.
const endpointChains = `table ip kube-proxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . udp . 53 : goto service-NWBZK7IH-kube-system/kube-dns/udp/dns,
			     10.96.0.20 . tcp . 8471 : goto service-AAAA-shop/pricing/tcp/grpc }
	}

	chain service-AAAA-shop/pricing/tcp/grpc {
		ip daddr 10.96.0.20 tcp dport 8471 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
		numgen random mod 3 vmap { 0 : goto endpoint-X-shop/pricing/tcp/grpc__10.244.0.7/8471, 1 : goto endpoint-Y-shop/pricing/tcp/grpc__10.244.0.5/8471,
			2 : goto endpoint-Z-shop/pricing/tcp/grpc__10.244.0.6/8471 }
	}

	chain endpoint-X-shop/pricing/tcp/grpc__10.244.0.7/8471 {
		ip saddr 10.244.0.7 jump mark-for-masquerade
		meta l4proto tcp dnat to 10.244.0.7:8471
	}

	chain endpoint-Y-shop/pricing/tcp/grpc__10.244.0.5/8471 {
		meta l4proto tcp dnat to 10.244.0.5:8471
	}

	chain endpoint-Z-shop/pricing/tcp/grpc__10.244.0.6/8471 {
		meta l4proto tcp dnat to 10.244.0.6:8471
	}
}
`

func TestParse(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name  string
		parse func(string) ([]Rule, error)
		text  string
		want  []Rule
	}{
		{
			name: "nftables v1.37 inline map (captured)", parse: ParseNFT, text: read("nft.txt"),
			want: []Rule{{VIP: netip.MustParseAddrPort("10.96.135.119:80"), Chain: "service-LU2YJSO7-default/echo/tcp/tcp", Endpoints: aps("10.244.0.2:8080", "10.244.0.3:8080")}},
		},
		{
			// kube-dns's one endpoint is DNATed by its service chain itself;
			// the kubernetes Service has no endpoints (no-endpoint-services).
			name: "nftables v1.37 single endpoint (captured)", parse: ParseNFT, text: read("nft-single-endpoint.txt"),
			want: []Rule{
				{VIP: netip.MustParseAddrPort("10.96.0.10:53"), Chain: "service-NWBZK7IH-kube-system/kube-dns/tcp/dns-tcp", Endpoints: aps("10.244.255.253:53")},
				{VIP: netip.MustParseAddrPort("10.96.48.61:8471"), Chain: "service-2TVQFOJV-shop/pricing/tcp/grpc", Endpoints: aps("10.244.0.2:8471", "10.244.0.3:8471")},
			},
		},
		{
			name: "nftables endpoint chains, UDP skipped", parse: ParseNFT, text: endpointChains,
			want: []Rule{{VIP: netip.MustParseAddrPort("10.96.0.20:8471"), Chain: "service-AAAA-shop/pricing/tcp/grpc", Endpoints: aps("10.244.0.5:8471", "10.244.0.6:8471", "10.244.0.7:8471")}},
		},
		{name: "nftables table not there yet", parse: ParseNFT, text: "", want: nil},
		{
			name: "iptables-save (captured)", parse: ParseIPTablesSave, text: read("iptables-save.txt"),
			want: []Rule{{VIP: netip.MustParseAddrPort("10.96.113.59:80"), Chain: "KUBE-SVC-BCTCTPECXSWGJENO", Endpoints: aps("10.244.0.2:8080", "10.244.0.3:8080")}},
		},
		{
			name: "iptables-save, Service without endpoints", parse: ParseIPTablesSave,
			text: `-A KUBE-SERVICES -d 10.96.0.9/32 -p tcp -m comment --comment "a/b:c cluster IP" -m tcp --dport 80 -j KUBE-SVC-EMPTY` + "\n",
			want: []Rule{{VIP: netip.MustParseAddrPort("10.96.0.9:80"), Chain: "KUBE-SVC-EMPTY"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseLastSync(t *testing.T) {
	b, err := os.ReadFile("testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	ipv4 := 1.7961923979491453e+09 // a variable: float64 arithmetic, as the parser's
	tests := []struct {
		name, body string
		want       time.Time
	}{
		{name: "captured, dual-stack: the older family", body: string(b), want: time.Unix(0, int64(ipv4*1e9))},
		{name: "one family not synced", body: syncMetric + `{ip_family="IPv4"} 1.5e+09` + "\n" + syncMetric + `{ip_family="IPv6"} 0` + "\n"},
		{name: "no metric", body: "kubeproxy_sync_proxy_rules_last_timestamp_seconds_total 3\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLastSync(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.want) {
				t.Errorf("parseLastSync = %v, want %v", got, tt.want)
			}
		})
	}
}
