package scenario_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/scenariotest"
	appsv1 "k8s.io/api/apps/v1"
)

// scenarioWith is the pricing workload plus a Scenario whose variants
// section is variants.
func scenarioWith(variants string) string {
	return scenariotest.Pricing(2) + `---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: t}
spec:
  duration: 10s
  clients:
  - name: order
    namespace: shop
    count: 2
    target: "` + scenariotest.Headless + `"
    policy: round_robin
    rate: 100
    retry: {maxAttempts: 3, initialBackoff: 100ms, maxBackoff: 1s, backoffMultiplier: 2, retryableStatusCodes: [Unavailable]}
  timeline:
  - {at: 2s, scale: {deployment: pricing, replicas: 4}}
  - {at: 4s, configureClient: {client: order-1, retry: null, rate: 50}}
  variants:
` + variants
}

func deployment(t *testing.T, v plan.Variant) *appsv1.Deployment {
	t.Helper()
	for _, o := range v.Objects {
		if d, ok := o.(*appsv1.Deployment); ok {
			return d
		}
	}
	t.Fatalf("variant %s has no Deployment", v.Name)
	return nil
}

// TestVariantPatches: a variant patches the workload's replicas, strategy
// and readiness probe; other variants and the file keep the original.
func TestVariantPatches(t *testing.T) {
	p := scenariotest.Load(t, scenarioWith(`  - name: base
  - name: patched
    patches:
    - target: {kind: Deployment, name: pricing}
      patch:
        spec:
          replicas: 3
          strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}
          template:
            spec:
              containers:
              - name: pricing
                readinessProbe: {grpc: {port: 8471}, periodSeconds: 1}
  - name: merged
    patches:
    - target: {kind: Deployment, name: pricing, namespace: shop}
      type: merge
      patch: {spec: {replicas: 5, minReadySeconds: 3}}
`))
	base, patched, merged := deployment(t, p.Variants[0]), deployment(t, p.Variants[1]), deployment(t, p.Variants[2])
	if *base.Spec.Replicas != 2 || base.Spec.Template.Spec.Containers[0].ReadinessProbe != nil {
		t.Errorf("variant base changed: replicas %d, probe %v", *base.Spec.Replicas, base.Spec.Template.Spec.Containers[0].ReadinessProbe)
	}
	c := patched.Spec.Template.Spec.Containers
	if *patched.Spec.Replicas != 3 || patched.Spec.Strategy.RollingUpdate.MaxSurge.IntVal != 0 || len(c) != 1 || c[0].ReadinessProbe == nil ||
		c[0].ReadinessProbe.PeriodSeconds != 1 || c[0].Image != "pinlab" {
		t.Errorf("patched: replicas %d, strategy %+v, containers %+v", *patched.Spec.Replicas, patched.Spec.Strategy, c)
	}
	if *merged.Spec.Replicas != 5 || merged.Spec.MinReadySeconds != 3 {
		t.Errorf("merged: replicas %d, minReadySeconds %d", *merged.Spec.Replicas, merged.Spec.MinReadySeconds)
	}
	if got := []int{p.Variants[0].PeakPods, p.Variants[1].PeakPods, p.Variants[2].PeakPods}; !cmp.Equal(got, []int{4, 4, 5}) {
		t.Errorf("peak pods %v, want [4 4 5]", got)
	}
	if !strings.Contains(p.Variants[1].Patches, "Deployment shop/pricing (strategic)") {
		t.Errorf("patches described as %q", p.Variants[1].Patches)
	}
}

// TestPatchErrors: a patch that does not apply, names no object, adds an
// unknown field or makes the object invalid is an error at its line.
func TestPatchErrors(t *testing.T) {
	tests := []struct {
		name, patch, want, marker string
	}{
		{name: "no such object", patch: "target: {kind: Deployment, name: prices}\n      patch: {spec: {replicas: 3}}",
			want: `spec.variants[0].patches[0].target: no Deployment "prices"`, marker: "prices"},
		{name: "unknown field", patch: "target: {kind: Deployment, name: pricing}\n      patch: {spec: {replica: 3}}",
			want: `spec.variants[0].patches[0].patch.spec.replica: unknown field`, marker: "replica: 3"},
		{name: "invalid value", patch: "target: {kind: Deployment, name: pricing}\n      patch: {spec: {replicas: -1}}",
			want: `spec.variants[0].patches[0].patch.spec.replicas`, marker: "replicas: -1"},
		{name: "probe on a port nothing listens on", patch: "target: {kind: Deployment, name: pricing}\n      patch: {spec: {template: {spec: {containers: [{name: pricing, readinessProbe: {tcpSocket: {port: 9999}}}]}}}}",
			want: `spec.variants[0].patches[0].patch.spec.template.spec.containers`, marker: "9999"},
		{name: "renames the object", patch: "target: {kind: Service, name: pricing}\n      patch: {metadata: {name: prices}}",
			want: "may not change an object's apiVersion, kind, name or namespace", marker: "name: prices"},
		{name: "bad type", patch: "target: {kind: Service, name: pricing}\n      type: apply\n      patch: {spec: {}}",
			want: `spec.variants[0].patches[0].type: "apply": expected one of strategic, merge, json`, marker: "type: apply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := scenarioWith("  - name: v\n    patches:\n    - " + tt.patch + "\n")
			_, err := scenario.Load("test.yaml", []byte(yaml))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if line := lineOf(yaml, tt.marker); !strings.Contains(err.Error(), fmt.Sprintf("test.yaml:%d:", line)) {
				t.Errorf("error %q is not at line %d (%q)", err, line, tt.marker)
			}
		})
	}
}

// TestOverlayNullRemoves: a variant's client overlay and a configureClient
// step are JSON merge patches: null removes an inherited setting.
func TestOverlayNullRemoves(t *testing.T) {
	p := scenariotest.Load(t, scenarioWith(`  - name: with-retry
  - name: no-retry
    clients: [{name: order, retry: null}]
`))
	with, without := p.Variants[0], p.Variants[1]
	if with.Groups[0].Settings.Retry == nil || with.Groups[0].Settings.Retry.MaxAttempts != 3 {
		t.Errorf("variant with-retry: retry %+v, want the group's", with.Groups[0].Settings.Retry)
	}
	if without.Groups[0].Settings.Retry != nil || without.Clients[1].Settings.Retry != nil {
		t.Errorf("variant no-retry: retry %+v, want none", without.Groups[0].Settings.Retry)
	}
	step := with.Steps[1].Action.(plan.ConfigureClients)
	if len(step.Clients) != 1 || step.Clients[0].Name != "order-1" || step.Clients[0].Settings.Retry != nil || step.Clients[0].Rate != 50 {
		t.Errorf("configureClient: %+v, want order-1 without retry at 50 calls/s", step.Clients)
	}
	if !strings.Contains(step.Describe(), "no retry") {
		t.Errorf("step described as %q", step.Describe())
	}
	if with.Clients[1].Settings.Retry == nil {
		t.Error("the step changed the variant's client plan itself")
	}
}

// TestPlanResolves: targets, defaults and steps come resolved.
func TestPlanResolves(t *testing.T) {
	p := scenariotest.Load(t, scenarioWith(`  - name: a
  - name: aged
    servers: [{deployment: pricing, maxConnectionAge: 5s}]
`))
	if p.DNS.TTL != 5*time.Second || p.MinResolutionInterval != 30*time.Second || p.Windows[0].Name != "run" {
		t.Errorf("defaults: DNS %+v, min resolution %v, windows %+v", p.DNS, p.MinResolutionInterval, p.Windows)
	}
	g := p.Variants[0].Groups[0]
	want := plan.Target{Namespace: "shop", Service: "pricing-headless", Host: "pricing-headless.shop.svc.cluster.local", Port: 8471,
		Headless: true, Selector: map[string]string{"app": "pricing"}, PortName: "grpc", PeakPods: 4}
	if diff := cmp.Diff(want, g.Target); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	if age := p.Variants[1].Groups[0].Target.MaxConnectionAge; age != 5*time.Second {
		t.Errorf("variant aged: MaxConnectionAge %v, want 5s", age)
	}
	if s, ok := p.Variants[0].Steps[0].Action.(plan.Scale); !ok || s.Workload.Name != "pricing" || s.Replicas != 4 {
		t.Errorf("first step %+v, want a scale of pricing to 4", p.Variants[0].Steps[0].Action)
	}
	if got := p.Timeline; len(got) != 2 || got[0] != "2s: scale Deployment pricing to 4" {
		t.Errorf("timeline %q", got)
	}
}

// TestChecksBeforeStart: what the API server would reject is an error of
// Load, before anything starts (clusterIP none, an address outside the
// lab's ranges).
func TestChecksBeforeStart(t *testing.T) {
	tests := []struct{ name, clusterIP, want string }{
		{"lowercase none", "none", `spec.clusterIP: Invalid value: "none": must be a valid IPv4 address or "None"`},
		{"outside the lab", "8.8.8.8", "spec.clusterIP: 8.8.8.8 is outside the lab's service ranges"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := strings.Replace(scenarioWith("  - name: a\n"), "metadata: {name: pricing, namespace: shop}\nspec:\n  selector",
				"metadata: {name: pricing, namespace: shop}\nspec:\n  clusterIP: "+tt.clusterIP+"\n  selector", 1)
			_, err := scenario.Load("test.yaml", []byte(yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `Service "pricing"`) {
				t.Errorf("Load: %v; want %q", err, tt.want)
			}
		})
	}
}

// TestMoreChecksBeforeStart: what a run would trip over later is an error
// at its line now.
func TestMoreChecksBeforeStart(t *testing.T) {
	base := scenarioWith("  - name: a\n")
	tests := []struct{ name, old, new, want string }{
		{"a fixed ClusterIP in a scenario", "metadata: {name: pricing, namespace: shop}\nspec:\n  selector",
			"metadata: {name: pricing, namespace: shop}\nspec:\n  clusterIP: 127.96.0.7\n  selector", "cannot ask for a fixed clusterIP"},
		{"a group named like another group's client", "  timeline:\n", "  - {name: order-1, namespace: shop, target: \"pricing:8471\", rate: 1}\n  timeline:\n",
			`"order-1" is also the name of a client of group "order"`},
		{"configureClient past the offered-load limit", "retry: null, rate: 50}", "rate: 8000}", "after this step the clients offer 8100 calls/s"},
		{"a variant patch that breaks an untouched group's target", "  - name: a\n",
			"  - name: a\n    patches:\n    - target: {kind: Service, name: pricing-headless}\n      type: json\n      patch: [{op: replace, path: /spec/clusterIP, value: \"\"}, {op: replace, path: /spec/ports/0/port, value: 9000}]\n",
			"in variant a: "},
		{"a pod of a later step", "  - {at: 2s, scale", "  - {at: 1s, notReady: {pod: \"@late\"}}\n  - {at: 2s, scale", `"@late": no earlier step named "late"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(base, tt.old) {
				t.Fatalf("test bug: %q not in the scenario", tt.old)
			}
			_, err := scenario.Load("test.yaml", []byte(strings.Replace(base, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load: %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestStepNamesAnEarlierStepsPod: "@step" in a pod step is the pod the
// earlier step picked.
func TestStepNamesAnEarlierStepsPod(t *testing.T) {
	yaml := strings.Replace(scenarioWith("  - name: a\n"), "  - {at: 2s, scale",
		"  - {at: 1s, name: nr, notReady: {deployment: pricing, pick: oldest}}\n  - {at: 3s, ready: {pod: \"@nr\"}}\n  - {at: 2s, scale", 1)
	p := scenariotest.Load(t, yaml)
	var found bool
	for _, st := range p.Variants[0].Steps {
		if a, ok := st.Action.(plan.PodAction); ok && a.Verb == plan.PodReady {
			found = true
			if a.Pod.Step != "nr" || a.Pod.Namespace != "shop" || st.Describe() != "3s: mark ready the pod of step nr" {
				t.Errorf("ready step %+v described %q; want the pod of step nr in shop", a.Pod, st.Describe())
			}
		}
	}
	if !found {
		t.Error("no ready step in the plan")
	}
}
