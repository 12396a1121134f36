package coredns

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestStartRefuses checks what Start refuses before running anything: a
// missing API, a missing port, and an address outside pinlab's ranges.
func TestStartRefuses(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no API", Config{Addr: netip.MustParseAddrPort("127.0.0.53:53")}, "REST is required"},
		{"no port", Config{REST: rc, Addr: netip.MustParseAddrPort("127.0.0.53:0")}, "needs an IP and a port"},
		{"no address", Config{REST: rc}, "needs an IP and a port"},
		{"public address", Config{REST: rc, Addr: netip.MustParseAddrPort("8.8.8.8:53")}, "refusing 8.8.8.8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Start(context.Background(), tt.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("Start(%+v) succeeded", tt.cfg)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: %v; want an error saying %q", err, tt.want)
			}
		})
	}
}
