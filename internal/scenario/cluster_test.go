package scenario_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/manifest"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/scenarios"
)

// TestCheckCluster: what a real cluster cannot reproduce is refused at
// its field, every field at once; what it can passes.
func TestCheckCluster(t *testing.T) {
	base := objects(2) + baseScenario
	tests := []struct {
		name     string
		old, new string // replace old by new in base
		objects  string // the objects, if not objects(2)
		want     []string
	}{
		{name: "nothing to refuse"},
		{name: "the DNS", old: "  duration: 10s", new: "  duration: 10s\n  dns: {ttl: 30s, cache: {success: {ttl: 30s}}}",
			want: []string{"spec.dns.ttl", "spec.dns.cache", "a real cluster's DNS is its own"}},
		{name: "kube-proxy mode", old: "  - name: a\n", new: "  - name: a\n    cluster: {proxyMode: ipvs}\n",
			want: []string{"spec.variants[0].cluster.proxyMode", "kube-proxy"}},
		{name: "dead addresses", old: "  duration: 10s", new: "  duration: 10s\n  cluster: {deadAddress: blackhole}",
			want: []string{"spec.cluster.deadAddress"}},
		{name: "a cached resolver", old: "    rate: 100", new: "    rate: 100\n    resolver: cached\n    cacheTTL: 30s",
			want: []string{`spec.clients[0].resolver`, `resolver "cached"`, "spec.clients[0].cacheTTL"}},
		{name: "a variant's resolver", old: "  - name: b\n", new: "  - name: b\n    clients: [{name: order, resolver: once}]\n",
			want: []string{`spec.variants[1].clients[0].resolver`, `resolver "once"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := base
			if tt.objects != "" {
				data = tt.objects + baseScenario
			}
			if tt.old != "" {
				if !strings.Contains(base, tt.old) {
					t.Fatalf("base lacks %q", tt.old)
				}
				data = strings.Replace(data, tt.old, tt.new, 1)
			}
			f, err := scenario.LoadObjects("s.yaml", []byte(data))
			if err != nil {
				t.Fatal(err)
			}
			err = scenario.CheckCluster(f, nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("CheckCluster: %v", err)
				}
				return
			}
			var me *manifest.Error
			if !errors.As(err, &me) {
				t.Fatalf("CheckCluster: %v, want manifest errors", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if !strings.Contains(err.Error(), "s.yaml:") {
				t.Errorf("error names no file and line:\n%v", err)
			}
		})
	}
}

// TestCheckClusterBuiltins: which built-ins a real cluster can run whole,
// and why the others cannot (rollout's fast-resolver variant models a
// client DNS cache, which the image's load client does not have yet).
func TestCheckClusterBuiltins(t *testing.T) {
	refused := map[string]string{
		"coredns-cache":    "spec.dns.cache: a real cluster's DNS is its own",
		"dns-cache":        `spec.variants[3].clients[0].resolver: resolver "once"`,
		"kube-proxy-modes": "spec.variants[1].cluster.proxyMode",
		"l7-proxy":         "spec.variants[2].clients[0].l7Proxy",
		"rollout":          `spec.variants[4].clients[0].resolver: resolver "cached"`,
		"same-effect":      `spec.variants[2].clients[0].protocol: the pinlab image's load client speaks gRPC only, not "websocket"`,
	}
	for _, name := range scenarios.Names() {
		f, err := scenario.OpenObjects(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		err = scenario.CheckCluster(f, nil)
		want, ok := refused[name]
		switch {
		case !ok && err != nil:
			t.Errorf("%s: %v, want it runnable on a real cluster", name, err)
		case ok && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	// A variant not run is not checked.
	f, err := scenario.OpenObjects(context.Background(), "rollout")
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.CheckCluster(f, []string{"headless-rr"}); err != nil {
		t.Errorf("rollout, variant headless-rr alone: %v, want it runnable", err)
	}
	demo, err := scenario.OpenObjects(context.Background(), "dns-demo")
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.CheckCluster(demo, nil); err == nil || !strings.Contains(err.Error(), "no Scenario document") {
		t.Errorf("dns-demo (no Scenario): %v, want a no-Scenario error", err)
	}
	for _, must := range []string{"scale-out", "not-ready", "restart-client"} {
		if _, ok := refused[must]; ok || !slices.Contains(scenarios.Names(), must) {
			t.Errorf("built-in %s must run on a real cluster", must)
		}
	}
}
