// Package scenariotest holds what tests of the run's stages share: the
// pricing workload of the claims as scenario YAML, and loading a scenario
// into a plan.
package scenariotest

import (
	"fmt"
	"testing"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/scenario"
)

// Headless is the headless Service's target as a dns:/// URI.
const Headless = "dns:///pricing-headless.shop.svc.cluster.local:8471"

// Pricing is the pricing workload of the claims: Namespace shop,
// Deployment pricing with the given replicas, ClusterIP Service pricing and
// headless Service pricing-headless, all on port 8471 (named grpc).
func Pricing(replicas int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: pricing, namespace: shop}
spec:
  replicas: %d
  selector: {matchLabels: {app: pricing}}
  template:
    metadata: {labels: {app: pricing}}
    spec:
      containers:
      - name: pricing
        image: pinlab
        args: [pod, pricing]
        ports: [{name: grpc, containerPort: 8471}]
---
apiVersion: v1
kind: Service
metadata: {name: pricing, namespace: shop}
spec:
  selector: {app: pricing}
  ports: [{name: grpc, port: 8471, targetPort: grpc}]
---
apiVersion: v1
kind: Service
metadata: {name: pricing-headless, namespace: shop}
spec:
  clusterIP: None
  selector: {app: pricing}
  ports: [{name: grpc, port: 8471, targetPort: grpc}]
`, replicas)
}

// Load loads yaml (named test.yaml) into a plan, failing t on an error.
func Load(t testing.TB, yaml string) *plan.Plan {
	t.Helper()
	p, err := scenario.Load("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
