package lab

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/proxy"
)

func TestParseDataplane(t *testing.T) {
	tests := []struct {
		in      string
		want    Dataplane
		mode    kubeproxy.Mode
		wantErr string
	}{
		{in: "", want: DataplanePinlab},
		{in: "pinlab", want: DataplanePinlab},
		{in: "kube-proxy-nftables", want: DataplaneKubeProxyNFTables, mode: kubeproxy.ModeNFTables},
		{in: "kube-proxy-iptables", want: DataplaneKubeProxyIPTables, mode: kubeproxy.ModeIPTables},
		{in: "kube-proxy-ipvs", wantErr: `dataplane "kube-proxy-ipvs": expected pinlab, kube-proxy-nftables, kube-proxy-iptables`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDataplane(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || got.KubeProxyMode() != tt.mode {
				t.Fatalf("ParseDataplane(%q) = %q (mode %q), %v; want %q (mode %q)", tt.in, got, got.KubeProxyMode(), err, tt.want, tt.mode)
			}
		})
	}
}

func TestDNSPodIP(t *testing.T) {
	tests := []struct{ pods, want string }{
		{"10.244.0.0/16", "10.244.255.253"},
		{"10.244.16.0/20", "10.244.31.253"},
		{"fd00::/64", "invalid IP"},
	}
	for _, tt := range tests {
		if got := DNSPodIP(netip.MustParsePrefix(tt.pods)); got.String() != tt.want {
			t.Errorf("DNSPodIP(%s) = %s, want %s", tt.pods, got, tt.want)
		}
	}
}

// TestRealDataplaneChecked: what Start refuses before anything runs.
func TestRealDataplaneChecked(t *testing.T) {
	api := func(dp Dataplane, kc kubeproxy.Config) *API {
		return &API{PodCIDR: netip.MustParsePrefix("10.244.0.0/16"), ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"), Dataplane: dp, KubeProxy: kc,
			CoreDNS: coredns.Config{REST: &rest.Config{Host: "https://127.0.0.1:6443"}}}
	}
	full := kubeproxy.Config{BinDir: "/bin", Kubeconfig: "/k"}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "ipvs plan", cfg: Config{API: api(DataplaneKubeProxyNFTables, full), Proxy: proxy.Config{Mode: proxy.ModeIPVS}},
			want: "proxy mode ipvs asked for, but the dataplane is the real kube-proxy in nftables mode"},
		{name: "no kubeconfig", cfg: Config{API: api(DataplaneKubeProxyIPTables, kubeproxy.Config{BinDir: "/bin"})},
			want: "dataplane kube-proxy-iptables needs API.KubeProxy.BinDir and Kubeconfig"},
		{name: "unknown", cfg: Config{API: api("kube-proxy-ebpf", full)}, want: `dataplane "kube-proxy-ebpf"`},
		{name: "no REST config for CoreDNS", cfg: Config{API: &API{PodCIDR: netip.MustParsePrefix("10.244.0.0/16"), ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"), Dataplane: DataplaneKubeProxyNFTables, KubeProxy: full}},
			want: "needs API.CoreDNS.REST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkKernelDataplane(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkKernelDataplane: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := checkKernelDataplane(Config{API: api(DataplaneKubeProxyNFTables, full), Proxy: proxy.Config{Mode: proxy.ModeIPTables}}); err != nil && !missingTool(err) {
		t.Errorf("an iptables plan on the nftables dataplane: %v, want it accepted (or only missing tools)", err)
	}
}

// missingTool reports whether err only says a tool this machine lacks
// (Debian's nft, conntrack or iptables; the CoreDNS build).
func missingTool(err error) bool {
	for _, s := range []string{"not found", "not installed", "not built"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}
