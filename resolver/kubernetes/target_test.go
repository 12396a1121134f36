package kubernetes

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/resolver"
)

// TestParseTarget: kuberesolver's target forms, port by name or number or
// none, the namespace defaulted; bad names refused.
func TestParseTarget(t *testing.T) {
	tests := []struct {
		name, target string
		want         string // canonical form; "" for an error
		err          string
	}{
		{name: "service.namespace:name", target: "kubernetes:///pricing.shop:grpc", want: "kubernetes://shop/pricing:grpc"},
		{name: "service.namespace:number", target: "kubernetes:///pricing.shop:8471", want: "kubernetes://shop/pricing:8471"},
		{name: "fully qualified", target: "kubernetes:///pricing.shop.svc.cluster.local:8471", want: "kubernetes://shop/pricing:8471"},
		{name: "service only", target: "kubernetes:///pricing:grpc", want: "kubernetes://mine/pricing:grpc"},
		{name: "no port", target: "kubernetes:///pricing.shop", want: "kubernetes://shop/pricing"},
		{name: "namespace/service", target: "kubernetes://shop/pricing:grpc", want: "kubernetes://shop/pricing:grpc"},
		{name: "host form", target: "kubernetes://pricing.shop:8471", want: "kubernetes://shop/pricing:8471"},
		{name: "host form with slash", target: "kubernetes://pricing.shop:8471/", want: "kubernetes://shop/pricing:8471"},
		{name: "no service", target: "kubernetes:///", err: "no Service name"},
		{name: "bad service", target: "kubernetes:///Pricing.shop:grpc", err: `Service name "Pricing"`},
		{name: "bad namespace", target: "kubernetes://sh_op/pricing:grpc", err: `namespace "sh_op"`},
		{name: "port zero", target: "kubernetes:///pricing.shop:0", err: "port 0"},
		{name: "bad port name", target: "kubernetes:///pricing.shop:grpc_port", err: `port name "grpc_port"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.target)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseTarget(resolver.Target{URL: *u}, "mine")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.String()); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodNamespace: the service account's namespace file, else "default".
func TestPodNamespace(t *testing.T) {
	old := namespaceFile
	t.Cleanup(func() { namespaceFile = old })
	namespaceFile = filepath.Join(t.TempDir(), "namespace")
	if got := podNamespace(); got != "default" {
		t.Errorf("without the file: %q, want default", got)
	}
	if err := os.WriteFile(namespaceFile, []byte("shop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := podNamespace(); got != "shop" {
		t.Errorf("with the file: %q, want shop", got)
	}
}
