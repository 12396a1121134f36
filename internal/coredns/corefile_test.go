package coredns

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestCorefile renders Corefiles and compares them with testdata/NAME.golden
// (run with -update after a deliberate change).
func TestCorefile(t *testing.T) {
	base := corefile{
		Addr:   netip.MustParseAddrPort("10.96.0.53:53"),
		Health: netip.MustParseAddrPort("127.0.0.1:8080"), Ready: netip.MustParseAddrPort("127.0.0.1:8181"),
		Metrics: netip.MustParseAddrPort("127.0.0.1:9153"),
		Zone:    "cluster.local", TTL: 30, Kubeconfig: "/state/kubeconfig",
	}
	lameduck := base
	lameduck.Lameduck, lameduck.Log = "5s", true
	for _, tt := range []struct {
		name string
		cf   corefile
	}{
		{"kubeadm", base},
		{"lameduck-log", lameduck},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cf.String()
			path := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("Corefile (-want +got):\n%s", diff)
			}
		})
	}
}
