package scenario_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/manifest"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/scenariotest"
	"github.com/pinlab/pinlab/scenarios"
)

var objects = scenariotest.Pricing

const baseScenario = `---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: t}
spec:
  duration: 10s
  clients:
  - name: order
    namespace: shop
    count: 2
    target: pricing.shop.svc.cluster.local:8471
    rate: 100
  timeline:
  - at: 2s
    scale: {deployment: pricing, replicas: 4}
  windows:
  - {name: all, from: 1s, to: 10s}
  variants:
  - name: a
  - name: b
    servers: [{deployment: pricing, maxConnectionAge: 5s}]
`

func TestLoadErrors(t *testing.T) {
	base := objects(2) + baseScenario
	tests := []struct {
		name     string
		old, new string // replace old by new in base
		marker   string // the error names the line holding marker
		want     []string
	}{
		{name: "yaml does not parse", old: "  duration: 10s", new: "  duration: [10s", marker: "", want: []string{"YAML does not parse"}},
		{name: "unknown field in the scenario", old: "    rate: 100", new: "    rat: 100", marker: "rat: 100", want: []string{"spec.clients[0].rat", `did you mean "rate"`}},
		{name: "unknown field in a Deployment", old: "  replicas: 2", new: "  replica: 2", marker: "replica: 2", want: []string{`Deployment "pricing"`, "spec.replica", `did you mean "replicas"`}},
		{name: "unknown kind", old: "kind: Namespace", new: "kind: Ingress", marker: "kind: Ingress", want: []string{"v1 Ingress is not supported"}},
		{name: "scale names a missing Deployment", old: "deployment: pricing, replicas: 4", new: "deployment: pricng, replicas: 4", marker: "pricng", want: []string{"spec.timeline[0].scale.deployment", `no Deployment "pricng"`, "shop/pricing"}},
		{name: "target names a missing Service", old: "target: pricing.shop", new: "target: prices.shop", marker: "target:", want: []string{"spec.clients[0].target", `no Service "prices"`}},
		{name: "negative rate", old: "rate: 100", new: "rate: -5", marker: "rate: -5", want: []string{"spec.clients[0].rate", "-5", "> 0"}},
		{name: "rate is not a number", old: "rate: 100", new: "rate: fast", marker: "rate: fast", want: []string{"spec.clients[0].rate", "expected a number"}},
		{name: "bad duration", old: "duration: 10s", new: "duration: ten", marker: "duration: ten", want: []string{"spec.duration"}},
		{name: "bad policy", old: "    rate: 100", new: "    rate: 100\n    policy: random", marker: "policy: random", want: []string{"spec.clients[0].policy", "pick_first"}},
		{name: "target with a foreign DNS server", old: "target: pricing", new: "target: dns://8.8.8.8/pricing", marker: "target:", want: []string{"without an authority"}},
		{name: "window past the end", old: "to: 10s}", new: "to: 11s}", marker: "name: all", want: []string{"spec.windows[0]", "to <= duration"}},
		{name: "step with no action", old: "    scale: {deployment: pricing, replicas: 4}", new: "", marker: "at: 2s", want: []string{"spec.timeline[0]", "exactly one action"}},
		{name: "restart of an unknown client", old: "    scale: {deployment: pricing, replicas: 4}", new: "    restartClient: {client: order-7}", marker: "order-7", want: []string{"restartClient.client", `"order-7" names no client`}},
		{name: "variant overlay on a missing Deployment", old: "deployment: pricing, maxConnectionAge", new: "deployment: pricer, maxConnectionAge", marker: "pricer", want: []string{"spec.variants[1].servers[0].deployment"}},
		{name: "duplicate variant", old: "  - name: b", new: "  - name: a", marker: "", want: []string{`variant "a" is defined twice`}},
		{name: "undeclared namespace", old: "metadata: {name: pricing, namespace: shop}\nspec:\n  selector", new: "metadata: {name: pricing, namespace: shoe}\nspec:\n  selector", marker: "namespace: shoe", want: []string{`namespace "shoe" is not defined`}},
		{name: "no scenario", old: baseScenario, new: "", marker: "", want: []string{"no Scenario document"}},
		{name: "two scenarios", old: baseScenario, new: baseScenario + baseScenario, marker: "", want: []string{"a second Scenario document"}},
		{name: "offered load beyond one machine", old: "    count: 2", new: "    count: 1000", marker: "", want: []string{"offers 100000 calls/s in all (1000 clients)", "at most 8000"}},
		{name: "scale beyond the lab", old: "replicas: 4}", new: "replicas: 100000}", marker: "replicas: 100000", want: []string{"spec.timeline[0].scale.replicas", "at most 1000"}},
		{name: "too many initial replicas", old: "  replicas: 2", new: "  replicas: 5000", marker: "replicas: 5000", want: []string{"spec.replicas", "at most 1000"}},
		{name: "image that is not pinlab", old: "image: pinlab", new: "image: nginx:1.25", marker: "nginx", want: []string{"spec.template.spec.containers[0].image", `"nginx:1.25" is not pinlab`}},
		{name: "unknown workload", old: "args: [pod, pricing]", new: "args: [pod, inventory]", marker: "inventory", want: []string{"spec.template.spec.containers[0].args", `unknown workload "inventory"`}},
		{name: "unsupported probe", old: "        args: [pod, pricing]", new: "        args: [pod, pricing]\n        readinessProbe: {exec: {command: [/bin/check]}}", marker: "readinessProbe", want: []string{"readinessProbe", "only grpc and tcpSocket"}},
		{name: "YAML bool where a string belongs", old: "        args: [pod, pricing]", new: "        args: [pod, pricing]\n        readinessProbe: {exec: {command: [false]}}", marker: "readinessProbe", want: []string{"spec.template.spec.containers[0].readinessProbe.exec.command", "cannot use a bool here; expected a list of strings"}},
		{name: "targetPort name no container has", old: "targetPort: grpc}]", new: "targetPort: grpcc}]", marker: "grpcc", want: []string{"spec.ports[0].targetPort", `no TCP container port named "grpcc"`, "named ports: grpc (TCP)"}},
		{name: "probe on a port nobody listens on", old: "        args: [pod, pricing]", new: "        args: [pod, pricing]\n        readinessProbe: {grpc: {port: 9999}}", marker: "readinessProbe", want: []string{"readinessProbe.grpc.port", "probes port 9999, but the server listens on 8471"}},
		{name: "duplicate container port names", old: "ports: [{name: grpc, containerPort: 8471}]", new: "ports: [{name: grpc, containerPort: 8471}, {name: grpc, containerPort: 9000}]", marker: "ports: [{name: grpc, containerPort: 8471}, ", want: []string{"containers[0].ports[1].name", "used twice"}},
		{name: "pods listen elsewhere", old: "args: [pod, pricing]", new: "args: [pod, pricing, --port=9000]", marker: "targetPort: grpc", want: []string{"spec.ports[0].targetPort", "listen on 9000", "refused"}},
		{name: "selector matches no pods", old: "  selector: {app: pricing}\n  ports", new: "  selector: {app: pricng}\n  ports", marker: "pricng", want: []string{"spec.selector", "selects no pods", "pricing: app=pricing"}},
		{name: "Deployment selector does not match its template", old: "selector: {matchLabels: {app: pricing}}", new: "selector: {matchLabels: {app: other}}", marker: "", want: []string{"spec.template.metadata.labels", "does not match", "would reject"}},
		{name: "client port not on the Service", old: "target: pricing.shop.svc.cluster.local:8471", new: "target: pricing.shop.svc.cluster.local:9999", marker: "9999", want: []string{"has no port 9999", "8471"}},
		{name: "headless client on the wrong port", old: "target: pricing.shop.svc.cluster.local:8471", new: "target: dns:///pricing-headless.shop.svc.cluster.local:9999", marker: "9999", want: []string{"headless", "pods' port (8471)"}},
		{name: "zero count", old: "    count: 2", new: "    count: 0", marker: "count: 0", want: []string{"spec.clients[0].count", "expected 1 to 1000"}},
		{name: "client namespace undeclared", old: "    namespace: shop\n    count: 2", new: "    namespace: nope\n    count: 2", marker: "namespace: nope", want: []string{"spec.clients[0].namespace", `"nope" is not defined`}},
		{name: "duplicate window", old: "  - {name: all, from: 1s, to: 10s}", new: "  - {name: all, from: 1s, to: 10s}\n  - {name: all, from: 2s, to: 3s}", marker: "from: 2s", want: []string{"spec.windows[1].name", "defined twice"}},
		{name: "endless duration", old: "duration: 10s", new: "duration: 100000h", marker: "duration:", want: []string{"spec.duration", "up to 1h0m0s"}},
		{name: "duration with a unit word", old: "duration: 10s", new: "duration: 20 seconds", marker: "duration:", want: []string{"spec.duration", "unknown unit", `a duration such as "10s"`}},
		{name: "bool in a list of strings", old: "args: [pod, pricing]", new: "args: [pod, true]", marker: "args:", want: []string{"spec.template.spec.containers[0].args", "expected a list of strings"}},
		{name: "too many pods in all", old: "---\napiVersion: pinlab.dev/v1alpha1", new: "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: stock, namespace: shop}\nspec:\n  replicas: 999\n  selector: {matchLabels: {app: stock}}\n  template:\n    metadata: {labels: {app: stock}}\n    spec: {containers: [{name: s, image: pinlab, args: [pod, pricing]}]}\n---\napiVersion: pinlab.dev/v1alpha1", marker: "", want: []string{"up to 1003 pods", "at most 1000"}},
		{name: "two overlays for every group", old: "  - name: a\n", new: "  - name: a\n    clients: [{rate: 7}, {rate: 9}]\n", marker: "", want: []string{"spec.variants[0].clients[1]", "a second overlay for every group"}},
		{name: "replicas beyond int32", old: "replicas: 4}", new: "replicas: 99999999999999999999}", marker: "replicas: 9999", want: []string{"spec.timeline[0].scale.replicas", "99999999999999999999 is out of range; expected an integer from -2147483648 to 2147483647"}},
		{name: "replicas with a fraction", old: "replicas: 4}", new: "replicas: 4.5}", marker: "replicas: 4.5", want: []string{"spec.timeline[0].scale.replicas", "4.5 is not a whole number; expected an integer"}},
		{name: "target at an IPv6 address", old: "target: pricing.shop.svc.cluster.local:8471", new: "target: \"[2001:db8::1]:8471\"", marker: "2001:db8", want: []string{"target", "2001:db8::1 is an IP address; a client targets a Service by name"}},
		{name: "negative replicas", old: "replicas: 4}", new: "replicas: -1}", marker: "replicas: -1", want: []string{"spec.timeline[0].scale.replicas"}},
		{name: "two actions in a step", old: "    scale: {deployment: pricing, replicas: 4}", new: "    scale: {deployment: pricing, replicas: 4}\n    killPod: {deployment: pricing}", marker: "at: 2s", want: []string{"spec.timeline[0]", "exactly one action", "got scale, killPod"}},
		{name: "pod action on a missing Deployment", old: "    scale: {deployment: pricing, replicas: 4}", new: "    deletePod: {deployment: pricer}", marker: "pricer", want: []string{"spec.timeline[0].deletePod.deployment", `no Deployment "pricer"`}},
		{name: "unknown pick", old: "    scale: {deployment: pricing, replicas: 4}", new: "    notReady: {deployment: pricing, pick: first}", marker: "pick: first", want: []string{"spec.timeline[0].notReady.pick", `"first"`, "busiest, quietest, oldest, newest"}},
		{name: "pod name no StatefulSet gives", old: "    scale: {deployment: pricing, replicas: 4}", new: "    killPod: {pod: pricing-0}", marker: "pricing-0", want: []string{"spec.timeline[0].killPod.pod", "no StatefulSet"}},
		{name: "grace period on a kill", old: "    scale: {deployment: pricing, replicas: 4}", new: "    killPod: {deployment: pricing, gracePeriodSeconds: 3}", marker: "gracePeriodSeconds", want: []string{"killPod.gracePeriodSeconds", "only deletePod"}},
		{name: "update with nothing to change", old: "    scale: {deployment: pricing, replicas: 4}", new: "    update: {deployment: pricing}", marker: "update:", want: []string{"spec.timeline[0].update", "set image, args or both"}},
		{name: "update to another image", old: "    scale: {deployment: pricing, replicas: 4}", new: "    update: {deployment: pricing, image: nginx}", marker: "image: nginx", want: []string{"spec.timeline[0].update.image", "only the pinlab image"}},
		{name: "update with bad args", old: "    scale: {deployment: pricing, replicas: 4}", new: "    update: {deployment: pricing, args: [pod, inventory]}", marker: "inventory", want: []string{"spec.timeline[0].update.args", "inventory"}},
		{name: "rollout restart of a missing StatefulSet", old: "    scale: {deployment: pricing, replicas: 4}", new: "    rolloutRestart: {statefulSet: db}", marker: "statefulSet: db", want: []string{"spec.timeline[0].rolloutRestart.statefulSet", `no StatefulSet "db"`}},
		{name: "configure an unknown client", old: "    scale: {deployment: pricing, replicas: 4}", new: "    configureClient: {client: cart, policy: round_robin}", marker: "client: cart", want: []string{"spec.timeline[0].configureClient.client", `"cart" names no client`}},
		{name: "unknown resolver", old: "    rate: 100", new: "    rate: 100\n    resolver: jvm", marker: "resolver: jvm", want: []string{"spec.clients[0].resolver", "grpc, cached, once"}},
		{name: "cache TTL without the cached resolver", old: "    rate: 100", new: "    rate: 100\n    cacheTTL: 30s", marker: "cacheTTL", want: []string{"spec.clients[0].cacheTTL", "resolver: cached"}},
		{name: "kubernetes resolver behind an L7 proxy", old: "    rate: 100", new: "    rate: 100\n    resolver: kubernetes\n    l7Proxy: {placement: sidecar}", marker: "resolver", want: []string{"spec.clients[0].resolver", "L7 proxy"}},
		{name: "bad cache TTL", old: "    rate: 100", new: "    rate: 100\n    resolver: cached\n    cacheTTL: always", marker: "cacheTTL", want: []string{"spec.clients[0].cacheTTL", "forever"}},
		{name: "retry with one attempt", old: "    rate: 100", new: "    rate: 100\n    retry: {maxAttempts: 1, initialBackoff: 10ms, maxBackoff: 100ms, backoffMultiplier: 2, retryableStatusCodes: [Unavailable]}", marker: "retry:", want: []string{"spec.clients[0].retry.maxAttempts", "2 to 5"}},
		{name: "retry on an unknown code", old: "    rate: 100", new: "    rate: 100\n    retry: {maxAttempts: 3, initialBackoff: 10ms, maxBackoff: 100ms, backoffMultiplier: 2, retryableStatusCodes: [UNAVAILABLE]}", marker: "retry:", want: []string{"retryableStatusCodes[0]", `"UNAVAILABLE"`, "Unavailable"}},
		{name: "stream length on unary calls", old: "    rate: 100", new: "    rate: 100\n    streamLength: 5s", marker: "streamLength", want: []string{"spec.clients[0].streamLength", "call: stream"}},
		{name: "unknown proxy mode", old: "  duration: 10s", new: "  duration: 10s\n  cluster: {proxyMode: userspace}", marker: "proxyMode", want: []string{"spec.cluster.proxyMode", "iptables, nftables, ipvs"}},
		{name: "unknown dead address mode in a variant", old: "  - name: a\n", new: "  - name: a\n    cluster: {deadAddress: drop}\n", marker: "deadAddress", want: []string{"spec.variants[0].cluster.deadAddress", "refuse, blackhole"}},
		{name: "expectation on an unknown metric", old: "  variants:", new: "  expect: [{name: x, metric: fairness, atLeast: 1}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].metric", `"fairness"`, "jain"}},
		{name: "expectation without a bound", old: "  variants:", new: "  expect: [{name: x, metric: failed}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0]", "atLeast, atMost"}},
		{name: "window metric without a window", old: "  variants:", new: "  expect: [{name: x, metric: jain, atLeast: 0.9}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].window", "measured in a window"}},
		{name: "expectation on an unknown window", old: "  variants:", new: "  expect: [{name: x, metric: jain, window: late, atLeast: 0.9}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].window", `"late" names no window`, "all"}},
		{name: "expectation on an unknown variant", old: "  variants:", new: "  expect: [{name: x, metric: failed, atMost: 0, variants: [c]}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].variants[0]", `"c" names no variant`}},
		{name: "pod metric on a step without a pod", old: "  variants:", new: "  expect: [{name: x, metric: podCalls, window: all, pod: '@nope', atLeast: 1}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].pod", `no timeline step is named "nope"`}},
		{name: "cause on a metric it does not narrow", old: "  variants:", new: "  expect: [{name: x, metric: jain, window: all, cause: refused, atLeast: 1}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0]", "narrow only the failed"}},
		{name: "unknown status code", old: "  variants:", new: "  expect: [{name: x, metric: failed, code: UNAVAILABLE, atMost: 0}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].code", "Unavailable"}},
		{name: "http client on pods without HTTP", old: "    rate: 100", new: "    rate: 100\n    protocol: http", marker: "target:", want: []string{"spec.clients[0].target", "serve no HTTP", "--http-port"}},
		{name: "gRPC client at the HTTP port", old: "args: [pod, pricing]", new: "args: [pod, pricing, --http-port=8471, --port=9000]", marker: "target:", want: []string{"HTTP/1.1 server", "gRPC port 9000"}},
		{name: "pool size from a variant on a gRPC group", old: "  - name: a\n", new: "  - name: a\n    clients: [{maxIdleConnsPerHost: 4}]\n", marker: "", want: []string{"spec.variants[0].clients[0].maxIdleConnsPerHost", "only with protocol: http"}},
		{name: "L7 proxy from a variant on an HTTP group", old: "  - name: a\n", new: "  - name: a\n    clients: [{protocol: http, l7Proxy: {placement: sidecar}}]\n", marker: "", want: []string{"spec.variants[0].clients[0]"}},
		{name: "share bound above 1", old: "  variants:", new: "  expect: [{name: x, metric: failedShare, atLeast: 2}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0]", "between 0 and 1"}},
		{name: "unknown cause", old: "  variants:", new: "  expect: [{name: x, metric: failed, cause: sadness, atMost: 0}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].cause", "refused", "connect-timeout"}},
		{name: "random pod name in an expectation", old: "  variants:", new: "  expect: [{name: x, metric: podCalls, window: all, pod: pricing-zzz, atLeast: 1}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].pod", "@<step name>"}},
		// Issue 15: grpc-go panics on an age of 1-9ns.
		{name: "age grpc-go cannot take in args", old: "args: [pod, pricing]", new: "args: [pod, pricing, --max-connection-age, 1ns]", marker: "1ns", want: []string{"spec.template.spec.containers[0].args", "max connection age 1ns: expected 0 (never) or at least 10ns"}},
		{name: "age grpc-go cannot take in a variant", old: "maxConnectionAge: 5s", new: "maxConnectionAge: 5ns", marker: "5ns", want: []string{"spec.variants[1].servers[0].maxConnectionAge", "at least 10ns"}},
		{name: "negative grace in a variant", old: "maxConnectionAge: 5s", new: "maxConnectionAge: 5s, maxConnectionAgeGrace: -1s", marker: "-1s", want: []string{"spec.variants[1].servers[0].maxConnectionAgeGrace", "must not be negative"}},
		// Issue 15: checks the API server makes, before anything starts.
		{name: "containerPort beyond 16 bits", old: "ports: [{name: grpc, containerPort: 8471}]", new: "ports: [{name: grpc, containerPort: 70000}]", marker: "70000", want: []string{"spec.template.spec.containers[0].ports[0].containerPort", "between 1 and 65535", "would reject"}},
		{name: "Service targetPort beyond 16 bits", old: "targetPort: grpc}]", new: "targetPort: 70000}]", marker: "70000", want: []string{"spec.ports[0].targetPort", "between 1 and 65535"}},
		{name: "probe port beyond 16 bits", old: "        args: [pod, pricing]", new: "        args: [pod, pricing]\n        readinessProbe: {tcpSocket: {port: 74007}}", marker: "74007", want: []string{"readinessProbe.tcpSocket.port", "between 1 and 65535"}},
		{name: "template annotations over 256 KiB", old: "    metadata: {labels: {app: pricing}}", new: "    metadata:\n      labels: {app: pricing}\n      annotations: {big: " + strings.Repeat("x", 256<<10) + "}", marker: "annotations:", want: []string{"spec.template.metadata.annotations", "may not be more than 262144 bytes"}},
		{name: "rate NaN", old: "rate: 100", new: "rate: .nan", marker: ".nan", want: []string{"spec.clients[0].rate: .nan is not a finite number"}},
		{name: "rate infinite", old: "rate: 100", new: "rate: .inf", marker: ".inf", want: []string{"spec.clients[0].rate: .inf is not a finite number"}},
		{name: "rate beyond float64", old: "rate: 100", new: "rate: 1e999", marker: "1e999", want: []string{"spec.clients[0].rate"}},
		{name: "backoff multiplier NaN", old: "    rate: 100", new: "    rate: 100\n    retry: {maxAttempts: 3, initialBackoff: 10ms, maxBackoff: 100ms, backoffMultiplier: .NaN, retryableStatusCodes: [Unavailable]}", marker: "retry:", want: []string{"spec.clients[0].retry.backoffMultiplier: .NaN is not a finite number"}},
		{name: "expectation bound NaN", old: "  variants:", new: "  expect: [{name: x, metric: failed, atMost: .nan}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0].atMost: .nan is not a finite number"}},
		{name: "variant rate NaN", old: "  - name: a\n", new: "  - name: a\n    clients: [{rate: -.inf}]\n", marker: "-.inf", want: []string{"spec.variants[0].clients[0].rate: -.inf is not a finite number"}},
		{name: "zero timeout", old: "    rate: 100", new: "    rate: 100\n    timeout: 0s", marker: "timeout: 0s", want: []string{"spec.clients[0].timeout", "0s: expected a positive deadline", "leave timeout out for the default 1s"}},
		{name: "negative timeout", old: "    rate: 100", new: "    rate: 100\n    timeout: -1s", marker: "timeout: -1s", want: []string{"spec.clients[0].timeout", "positive"}},
		{name: "inverted bounds", old: "  variants:", new: "  expect: [{name: x, metric: failed, atLeast: 5, atMost: 1}]\n  variants:", marker: "expect:", want: []string{"spec.expect[0]", "above atMost"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(base, tt.old) {
				t.Fatalf("test bug: %q not in base", tt.old)
			}
			yaml := strings.Replace(base, tt.old, tt.new, 1)
			_, err := scenario.Load("test.yaml", []byte(yaml))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			var me *manifest.Error
			if !errors.As(err, &me) {
				t.Errorf("error %T is not a *manifest.Error: %v", err, err)
			}
			want := append([]string{"test.yaml"}, tt.want...)
			if tt.marker != "" {
				want = append(want, fmt.Sprintf("test.yaml:%d:", lineOf(yaml, tt.marker)))
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func lineOf(text, marker string) int {
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, marker) {
			return i + 1
		}
	}
	return 0
}

func TestOpen(t *testing.T) {
	if _, err := scenario.Open(context.Background(), "/nonexistent/scenario.yaml"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Open of a missing file: %v, want a no-such-file error", err)
	}
	for _, name := range scenarios.Names() {
		t.Run(name, func(t *testing.T) {
			p, err := scenario.Open(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Variants) == 0 || len(p.Variants[0].Clients) == 0 {
				t.Fatal("no variants or clients")
			}
		})
	}
}

func TestOpenObjects(t *testing.T) {
	for _, name := range scenarios.Manifests() {
		t.Run(name, func(t *testing.T) {
			f, err := scenario.OpenObjects(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Objects) == 0 {
				t.Fatal("no objects")
			}
		})
	}
	if _, err := scenario.Open(context.Background(), "dns-demo"); err == nil || !strings.Contains(err.Error(), "no Scenario document") {
		t.Errorf("lab run on a manifest without a Scenario: %v, want a no-Scenario error", err)
	}
}

func TestStatefulSetChecks(t *testing.T) {
	sts := `apiVersion: v1
kind: Namespace
metadata: {name: data}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: data}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432, targetPort: pg}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: data}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: pg, image: pinlab, args: [pod, pricing, --port=5432], ports: [{name: pg, containerPort: 5432}]}]
`
	if _, err := scenario.LoadObjects("s.yaml", []byte(sts)); err != nil {
		t.Fatalf("valid StatefulSet rejected: %v", err)
	}
	// What the API server takes but would spoil a run is a warning for lab
	// up, which applies objects as kubectl apply does.
	tests := []struct {
		name, old, new, want string
		warning              bool
	}{
		{"missing governing Service", "serviceName: db", "serviceName: dbx", `no Service "dbx"`, true},
		{"no serviceName", "  serviceName: db\n", "", "spec.serviceName: required", true},
		{"bad policy", "  replicas: 2", "  replicas: 2\n  podManagementPolicy: Random", "spec.podManagementPolicy", false},
		{"pods listen elsewhere", "--port=5432", "--port=5433", "listen on 5433", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := scenario.LoadObjects("s.yaml", []byte(strings.Replace(sts, tt.old, tt.new, 1)))
			if !tt.warning {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want one containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, want a warning", err)
			}
			if len(f.Warnings) != 1 || !strings.Contains(f.Warnings[0].Error(), tt.want) {
				t.Errorf("warnings %v, want one containing %q", f.Warnings, tt.want)
			}
		})
	}
}

// TestLoadKubeSystem: a file may declare the kube-system Namespace every
// lab has, and put objects in it (issue 15: lab up refused it as existing).
func TestLoadKubeSystem(t *testing.T) {
	ks := "apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system, labels: {team: platform}}\n---\n" +
		"apiVersion: v1\nkind: Service\nmetadata: {name: legacy, namespace: kube-system}\nspec:\n  clusterIP: None\n  ports: [{name: pg, port: 5432}]\n---\n"
	if _, err := scenario.Load("test.yaml", []byte(ks+objects(2)+baseScenario)); err != nil {
		t.Errorf("Load: %v", err)
	}
	if _, err := scenario.LoadObjects("test.yaml", []byte(ks)); err != nil {
		t.Errorf("LoadObjects: %v", err)
	}
}

// TestLabUpRefusesWhatLabRunRefuses: lab up (LoadObjects) does not run a
// Scenario document, but refuses what lab run (Load) refuses in it, with
// the same error (a tester found 27 of 72 malformed Scenario documents
// started by lab up without a word).
func TestLabUpRefusesWhatLabRunRefuses(t *testing.T) {
	base := objects(2) + baseScenario
	tests := []struct {
		name     string
		old, new string // replace old by new in base
	}{
		{name: "duration of 100h", old: "duration: 10s", new: "duration: 100h"},
		{name: "duplicate variants", old: "  - name: b", new: "  - name: a"},
		{name: "scale to 1e9", old: "replicas: 4}", new: "replicas: 1000000000}"},
		{name: "atLeast above atMost", old: "  variants:", new: "  expect: [{name: x, metric: failed, atLeast: 5, atMost: 1}]\n  variants:"},
		{name: "an unknown metric", old: "  variants:", new: "  expect: [{name: x, metric: fairness, atLeast: 1}]\n  variants:"},
		{name: "a target at an IP address", old: "target: pricing.shop.svc.cluster.local:8471", new: "target: \"[2001:db8::1]:8471\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(strings.Replace(base, tt.old, tt.new, 1))
			_, runErr := scenario.Load("s.yaml", data)
			if runErr == nil {
				t.Fatal("lab run's Load took it")
			}
			_, upErr := scenario.LoadObjects("s.yaml", data)
			if upErr == nil || upErr.Error() != runErr.Error() {
				t.Errorf("lab up's LoadObjects: %v\nwant lab run's error: %v", upErr, runErr)
			}
		})
	}
	t.Run("a good Scenario document", func(t *testing.T) {
		if _, err := scenario.LoadObjects("s.yaml", []byte(base)); err != nil {
			t.Fatal(err)
		}
	})
}
