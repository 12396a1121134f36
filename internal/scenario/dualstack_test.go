package scenario_test

import (
	"testing"

	"github.com/pinlab/pinlab/internal/scenario"
)

// TestRangeFromClusterIPs: a dual-stack Service that writes only
// clusterIPs pins lab up to the range of its IPv4 address, as one that
// writes clusterIP does.
func TestRangeFromClusterIPs(t *testing.T) {
	svc := "apiVersion: v1\nkind: Service\nmetadata: {name: dual}\nspec:\n  ipFamilyPolicy: RequireDualStack\n  clusterIPs: [127.107.0.50, \"fd00:10:96::50\"]\n  ports: [{name: pg, port: 5432}]\n"
	f, err := scenario.LoadObjects("f.yaml", []byte(svc))
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Range(); r != 12 {
		t.Errorf("Range() = %d, want 12 (127.107.0.0/16)", r)
	}
}
