package plan

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestForKubeProxy: under the real kube-proxy, ipvs variants are left
// out, iptables or nftables variants of the other mode run in the real
// one, and a plan of ipvs variants only has nothing left.
func TestForKubeProxy(t *testing.T) {
	variant := func(name, mode string) Variant { return Variant{Name: name, Cluster: Cluster{ProxyMode: mode}} }
	tests := []struct {
		name      string
		variants  []Variant
		want      []string // the variants kept
		leftOut   []string
		otherMode []string
		wantErr   error
	}{
		{name: "no ipvs", variants: []Variant{variant("a", "nftables"), variant("b", "")}, want: []string{"a", "b"}},
		{name: "iptables on nftables", variants: []Variant{variant("a", "iptables"), variant("b", "nftables")}, want: []string{"a", "b"}, otherMode: []string{"a"}},
		{name: "one ipvs", variants: []Variant{variant("iptables", "iptables"), variant("ipvs", "ipvs"), variant("nftables", "nftables")},
			want: []string{"iptables", "nftables"}, leftOut: []string{"ipvs"}, otherMode: []string{"iptables"}},
		{name: "only ipvs", variants: []Variant{variant("ipvs", "ipvs")}, wantErr: ErrNoVariantLeft},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fit, err := (&Plan{Name: "kube-proxy-modes", Variants: tt.variants}).ForKubeProxy(ProxyModeNFTables)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("ForKubeProxy: %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, fit.Plan.VariantNames()); diff != "" {
				t.Errorf("variants kept (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.leftOut, fit.LeftOut); diff != "" {
				t.Errorf("left out (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.otherMode, fit.OtherMode); diff != "" {
				t.Errorf("run in the other mode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFitsDiagnosis(t *testing.T) {
	p := &Plan{Duration: 30 * time.Second}
	tests := []struct {
		name       string
		at, window time.Duration
		want       bool
	}{
		{name: "ends before the load", at: 20 * time.Second, window: 5 * time.Second, want: true},
		{name: "ends with the load", at: 25 * time.Second, window: 5 * time.Second, want: true},
		{name: "ends after the load", at: 26 * time.Second, window: 5 * time.Second, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.FitsDiagnosis(tt.at, tt.window); got != tt.want {
				t.Errorf("FitsDiagnosis(%v, %v) = %v, want %v", tt.at, tt.window, got, tt.want)
			}
		})
	}
}
