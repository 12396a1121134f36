package kubelab

import (
	"net/netip"
	"testing"
)

func TestSubnet(t *testing.T) {
	tests := []struct {
		name    string
		p       string
		bits, i int
		want    string // "" for an error
	}{
		{name: "first variant's pods", p: "10.244.0.0/16", bits: 20, i: 0, want: "10.244.0.0/20"},
		{name: "second variant's Services", p: "10.96.0.0/16", bits: 20, i: 1, want: "10.96.16.0/20"},
		{name: "last /20", p: "10.244.0.0/16", bits: 20, i: 15, want: "10.244.240.0/20"},
		{name: "beyond the range", p: "10.244.0.0/16", bits: 20, i: 16},
		{name: "wider than the range", p: "10.244.0.0/16", bits: 8, i: 0},
		{name: "IPv6", p: "fd00::/64", bits: 80, i: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subnet(netip.MustParsePrefix(tt.p), tt.bits, tt.i)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("subnet = %v, want an error", got)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("subnet = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}
