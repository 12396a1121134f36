package scenario_test

import (
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/scenariotest"
)

// balancedScenario is the pricing workload with the Service pricing's
// metadata replaced by meta and one client group whose target and
// policy lines are client.
func balancedScenario(meta, client string) string {
	objs := strings.Replace(scenariotest.Pricing(2), "metadata: {name: pricing, namespace: shop}\nspec:\n  selector", meta+"\nspec:\n  selector", 1)
	return objs + `---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: t}
spec:
  duration: 10s
  clients:
  - name: order
    namespace: shop
    rate: 10
` + client
}

// TestBalancing: xds:/// targets take grpc-go's xDS resolver and their
// Service's annotated policy; other targets take a policy and its
// settings; what cannot work is an error naming the field.
func TestBalancing(t *testing.T) {
	const plain = "metadata: {name: pricing, namespace: shop}"
	const annotated = "metadata:\n  name: pricing\n  namespace: shop\n  annotations:\n    xds.pinlab.dev/lb-policy: least_request\n    xds.pinlab.dev/lb-config: '{\"choiceCount\": 3}'"
	const bad = "metadata:\n  name: pricing\n  namespace: shop\n  annotations:\n    xds.pinlab.dev/lb-policy: fastest"
	tests := []struct {
		name, meta, client string
		want               string // the group's resolver, policy and settings, or an error
	}{
		{"xds", plain, "    target: xds:///pricing.shop:8471\n", "xds round_robin  xds:///pricing.shop:8471"},
		{"xds with the Service's policy", annotated, "    target: xds:///pricing.shop:8471\n", `xds least_request {"choiceCount":3} xds:///pricing.shop:8471`},
		{"xds to a headless Service", plain, "    target: xds:///pricing-headless.shop:8471\n", "xds round_robin  xds:///pricing-headless.shop:8471"},
		{"xds with a policy", plain, "    target: xds:///pricing.shop:8471\n    policy: round_robin\n", "error: spec.clients[0].policy: an xds:/// target's policy is the control plane's"},
		{"xds with a resolver", plain, "    target: xds:///pricing.shop:8471\n    resolver: kubernetes\n", "error: spec.clients[0].resolver"},
		{"xds with a short name", plain, "    target: xds:///pricing:8471\n", "error: spec.clients[0].target: xds:///pricing:8471: expected xds:///<service>.<namespace>:<port>"},
		{"xds to a port the Service lacks", plain, "    target: xds:///pricing.shop:9000\n", "error: has no port 9000"},
		{"xds to a Service with a bad annotation", bad, "    target: xds:///pricing.shop:8471\n", `error: (Service "pricing"): metadata.annotations: annotation xds.pinlab.dev/lb-policy="fastest"`},
		{"least_request with settings", plain, "    target: dns:///pricing-headless:8471\n    policy: least_request\n    policyConfig: {choiceCount: 3}\n",
			`grpc least_request {"choiceCount":3} dns://DNS/pricing-headless.shop.svc.cluster.local:8471`},
		{"weighted_round_robin", plain, "    target: dns:///pricing-headless:8471\n    policy: weighted_round_robin\n    policyConfig: {blackoutPeriod: 2s}\n",
			`grpc weighted_round_robin {"blackoutPeriod":"2s"} dns://DNS/pricing-headless.shop.svc.cluster.local:8471`},
		{"settings of another policy", plain, "    target: dns:///pricing-headless:8471\n    policy: least_request\n    policyConfig: {blackoutPeriod: 2s}\n",
			`error: spec.clients[0].policyConfig: least_request settings: json: unknown field "blackoutPeriod"`},
		{"settings without a policy", plain, "    target: dns:///pricing-headless:8471\n    policyConfig: {choiceCount: 3}\n", "error: pick_first takes no settings"},
		{"xds with an authority", plain, "    target: xds://foo/pricing.shop:8471\n", "error: expected xds:///<service>.<namespace>:<port> (no authority)"},
		{"xds without a port", plain, "    target: xds:///pricing.shop\n", "error: xds:///pricing.shop: expected xds:///<service>.<namespace>:<port>"},
		{"xds over HTTP/1.1", plain, "    target: xds:///pricing.shop:8471\n    protocol: http\n", "error: spec.clients[0].protocol: http: an xds:/// target is for gRPC clients"},
		{"xds with retries", plain, "    target: xds:///pricing.shop:8471\n    retry: {maxAttempts: 3, initialBackoff: 100ms, maxBackoff: 1s, backoffMultiplier: 2, retryableStatusCodes: [Unavailable]}\n", "error: spec.clients[0].retry: an xds:/// client's service config is the control plane's"},
		{"xds with a cluster.local name", plain, "    target: xds:///pricing.shop.svc.cluster.local:8471\n", "error: expected xds:///<service>.<namespace>:<port>"},
		{"ring_hash without a header", plain, "    target: dns:///pricing-headless:8471\n    policy: ring_hash\n", "error: spec.clients[0].policy: ring_hash needs requestHashHeader outside xDS"},
		{"ring_hash on the clients' names", plain, "    target: dns:///pricing-headless:8471\n    policy: ring_hash\n    policyConfig: {requestHashHeader: pinlab-client}\n",
			`grpc ring_hash {"requestHashHeader":"pinlab-client"} dns://DNS/pricing-headless.shop.svc.cluster.local:8471`},
		{"an unknown policy", plain, "    target: dns:///pricing-headless:8471\n    policy: fastest\n", "error: spec.clients[0].policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := scenario.Load("test.yaml", []byte(balancedScenario(tt.meta, tt.client)))
			if want, isErr := strings.CutPrefix(tt.want, "error: "); isErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Load: %v; want an error containing %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g := p.Variants[0].Groups[0]
			target := g.Target.GRPCTarget("DNS")
			if g.Target.XDS {
				target = g.Target.XDSTarget()
			}
			if got := g.Settings.Resolver + " " + g.Policy + " " + g.Settings.PolicySettings + " " + target; got != tt.want {
				t.Errorf("group: %q, want %q", got, tt.want)
			}
		})
	}
}
