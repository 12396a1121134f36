package labup

import (
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/plan"
)

// TestLoadTargetXDS: lab load reads an xDS name as the control plane
// serves it, needs --xds-server for it (a lab address) and only for it;
// every mistake is a usage error.
func TestLoadTargetXDS(t *testing.T) {
	tests := []struct {
		target, server string
		want           plan.Target
		err            string
	}{
		{target: "xds:///pricing.shop:8471", server: "127.96.0.42:18000", want: plan.Target{XDS: true, Service: "pricing", Namespace: "shop", Port: 8471}},
		{target: "xds:///pricing.shop:8471", err: "name the xDS control plane with --xds-server"},
		{target: "xds:///pricing.shop:8471", server: "8.8.8.8:18000", err: "--xds-server 8.8.8.8:18000: not an address of the lab"},
		{target: "xds:///pricing.shop:8471", server: "pinlab-xds.pinlab-xds.svc.cluster.local:18000", err: "want IP:PORT, the control plane's address in the lab"},
		{target: "xds:///pricing:8471", server: "127.96.0.42:18000", err: "want xds:///SERVICE.NAMESPACE:PORT"},
		{target: "xds:///pricing.shop.svc.cluster.local:8471", server: "127.96.0.42:18000", err: "want xds:///SERVICE.NAMESPACE:PORT"},
		{target: "xds:///pricing.shop:http", server: "127.96.0.42:18000", err: "want xds:///SERVICE.NAMESPACE:PORT"},
		{target: "pricing:8471", server: "127.96.0.42:18000", err: "only for an xds:/// target"},
		{target: "xds://foo/pricing.shop:8471", server: "127.96.0.42:18000", err: "want xds:///SERVICE.NAMESPACE:PORT (no authority)"},
	}
	for _, tt := range tests {
		t.Run(tt.target+" "+tt.server, func(t *testing.T) {
			got, err := loadTarget(tt.target, "shop")
			if err == nil {
				_, err = xdsResolver(got, tt.server)
			}
			if tt.err == "" {
				if err != nil || got.XDS != tt.want.XDS || got.Service != tt.want.Service || got.Namespace != tt.want.Namespace || got.Port != tt.want.Port {
					t.Fatalf("%+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			if code, _ := exit.Of(t.Context(), err); err == nil || !strings.Contains(err.Error(), tt.err) || code != exit.Usage {
				t.Errorf("error %v; want a usage error containing %q", err, tt.err)
			}
		})
	}
}
