// Package scenariotest holds what tests of the run's stages share: the
// pricing workload as scenario YAML, and loading a scenario
// into a plan.
package scenariotest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/scenario"
)

// Headless is the headless Service's target as a dns:/// URI.
const Headless = "dns:///pricing-headless.shop.svc.cluster.local:8471"

// Pricing is the pricing workload: Namespace shop,
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

// Manifests for lab up's checks: NamespaceDoc, the Namespace data.
const (
	NamespaceDoc = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: data\n"
	// LegacyDocs is a selector-less headless Service and its slice; %s is
	// the endpoint's hostname.
	LegacyDocs = "apiVersion: v1\nkind: Service\nmetadata:\n  name: legacy\n  namespace: data\nspec:\n  clusterIP: None\n  ports:\n  - {name: pg, port: 5432}\n---\n" +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: legacy-1\n  namespace: data\n  labels: {kubernetes.io/service-name: legacy}\naddressType: IPv4\nports:\n- {name: pg, port: 5432}\nendpoints:\n- addresses: [192.0.2.10]\n  hostname: %s\n"
	// WebDocs is a Deployment of pods labelled app=web; %s is a Service
	// port list.
	WebDocs = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: data}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - {name: web, image: pinlab, args: [pod, pricing], ports: [{name: grpc, containerPort: 8471}]}\n---\n" +
		"apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: data}\nspec:\n  selector: {app: web}\n  ports: %s\n"
)

// Manifests for lab up's warnings: ProbeDocs, a Deployment whose pods have
// one probe (%s: its YAML, 8 spaces in); DualStackDoc, a dual-stack
// Service (%s: its ipFamilyPolicy, then its clusterIPs); IPv6SliceDoc, a
// headless Service and an IPv6 slice.
const (
	ProbeDocs    = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: data}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - name: web\n        image: pinlab\n        args: [pod, pricing]\n        ports: [{name: grpc, containerPort: 8471}]\n%s"
	DualStackDoc = "apiVersion: v1\nkind: Service\nmetadata: {name: dual, namespace: data}\nspec:\n  ipFamilyPolicy: %s\n  clusterIPs: %s\n  ports: [{name: pg, port: 5432}]\n"
	IPv6SliceDoc = "apiVersion: v1\nkind: Service\nmetadata: {name: legacy6, namespace: data}\nspec:\n  clusterIP: None\n  ports: [{name: pg, port: 5432}]\n---\n" +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: legacy6-1\n  namespace: data\n  labels: {kubernetes.io/service-name: legacy6}\naddressType: IPv6\nendpoints:\n- addresses: [\"2001:db8::10\"]\n"
)

// WriteFile writes a manifest into the test's directory and returns its path.
func WriteFile(t testing.TB, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// WithNamespace puts the namespace document before a manifest with one
// argument filled in.
func WithNamespace(format string, args ...any) string {
	return NamespaceDoc + "---\n" + strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n"
}
