package clusterrun

import (
	"context"
	"net"
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

// TestDeadContext: an API server that refuses connections, or accepts
// them and never answers, fails the run within reachableTimeout, saying
// so, before consent and with nothing created.
func TestDeadContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	defer func() { ln.Close(); <-accepted }()
	for _, tt := range []struct {
		name, server, want string
	}{
		// 127.0.0.1:9 (discard) refuses connections: no server there.
		{"refused", "https://127.0.0.1:9", "connection refused"},
		{"silent", "https://" + ln.Addr().String(), "did not answer within 10s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kubeconfig := filepath.Join(t.TempDir(), "config")
			cfg := `apiVersion: v1
kind: Config
clusters: [{name: dead, cluster: {server: "` + tt.server + `", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: dead, context: {cluster: dead, user: u}}]
current-context: dead
`
			if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := Run(context.Background(), Options{Scenario: "scale-out", Image: "x@sha256:00", Kube: &evidence.Kube{Kubeconfig: kubeconfig},
				Confirm: func(context.Context, string) (bool, error) { t.Error("asked for consent"); return false, nil }})
			if err == nil || !strings.Contains(err.Error(), tt.server) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run: %v, want an error naming the API server and saying %q", err, tt.want)
			}
			if d := time.Since(start); d > reachableTimeout+5*time.Second {
				t.Errorf("Run took %v, want at most %v", d, reachableTimeout)
			}
		})
	}
}
