package clusterrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
)

// TestRefused: what a cluster run cannot do is refused, naming it, before
// any call to a cluster (the kubeconfig here names none).
func TestRefused(t *testing.T) {
	for _, tt := range []struct {
		scenario string
		variants []string
		want     string
	}{
		{"rollout", nil, `spec.variants[4].clients[0].resolver: resolver "cached"`},
		{"rollout", []string{"stock", "clusterip"}, "kubeconfig"}, // checked, then no cluster
		{"kubernetes-resolver", nil, "resolver kubernetes: not on a cluster yet"},
		{"coredns-cache", nil, "spec.dns"},
		{"l7-proxy", nil, "l7Proxy"},
		{"scale-out", []string{"nope"}, "--variant"},
		{"no-such-scenario", nil, "no-such-scenario"},
	} {
		t.Run(tt.scenario, func(t *testing.T) {
			_, err := Run(context.Background(), Options{Scenario: tt.scenario, Image: "x@sha256:00", Variants: tt.variants,
				Kube: &evidence.Kube{Kubeconfig: filepath.Join(t.TempDir(), "none")}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run(%s): %v, want an error naming %q", tt.scenario, err, tt.want)
			}
		})
	}
}

// TestDeadContext: an API server that does not answer fails the run
// within reachableTimeout, saying so, with nothing created.
func TestDeadContext(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	// 127.0.0.1:9 (discard) refuses connections: no server there.
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: dead, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: dead, context: {cluster: dead, user: u}}]
current-context: dead
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := Run(context.Background(), Options{Scenario: "scale-out", Image: "x@sha256:00", Kube: &evidence.Kube{Kubeconfig: kubeconfig},
		Confirm: func(string) (bool, error) { t.Error("asked for consent"); return false, nil }})
	if err == nil || !strings.Contains(err.Error(), "https://127.0.0.1:9") {
		t.Errorf("Run: %v, want an error naming the API server", err)
	}
	if d := time.Since(start); d > reachableTimeout+5*time.Second {
		t.Errorf("Run took %v, want at most %v", d, reachableTimeout)
	}
}
