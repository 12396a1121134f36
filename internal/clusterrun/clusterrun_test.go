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
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// testImage is a well-formed image reference pinned by digest.
const testImage = "registry.example/acme/pinlab@sha256:0000000000000000000000000000000000000000000000000000000000000000"

// TestRefused: what a cluster run cannot do is refused, naming it, before
// any call to a cluster (the kubeconfig here names none).
func TestRefused(t *testing.T) {
	for _, tt := range []struct {
		scenario string
		variants []string
		want     string
		usage    bool // exit 2, else 1
	}{
		{"rollout", nil, `spec.variants[4].clients[0].resolver: resolver "cached"`, false},
		{"rollout", []string{"stock", "clusterip"}, "kubeconfig", true}, // checked, then no cluster
		{"kubernetes-resolver", nil, "kubernetes-resolver: cluster run cannot run this yet", false},
		{"coredns-cache", nil, "spec.dns", false},
		{"l7-proxy", nil, "l7Proxy", false},
		{"not-ready", nil, "kubeconfig", true}, // checked, then no cluster
		{"scale-out", []string{"nope"}, "--variant", true},
		{"no-such-scenario", nil, "no-such-scenario", true},
		{"dns-demo", nil, "lab manifest without one", true},
	} {
		t.Run(tt.scenario, func(t *testing.T) {
			_, err := Run(context.Background(), Options{Scenario: tt.scenario, Image: testImage, Variants: tt.variants,
				Kube: &evidence.Kube{Kubeconfig: filepath.Join(t.TempDir(), "none")}})
			if err == nil || !strings.Contains(err.Error(), tt.want) || exit.IsUsage(err) != tt.usage {
				t.Errorf("Run(%s): %v (usage error: %v), want an error naming %q (usage error: %v)", tt.scenario, err, exit.IsUsage(err), tt.want, tt.usage)
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
			_, err := Run(context.Background(), Options{Scenario: "scale-out", Image: testImage, Kube: &evidence.Kube{Kubeconfig: kubeconfig},
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

// TestStepFits: steps a cluster would not carry out as the lab does are
// refused, naming why.
func TestStepFits(t *testing.T) {
	probe := func(p *corev1.Probe) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "pricing"}, Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "p", ReadinessProbe: p}}}}}}
	}
	grpcProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471}}}
	httpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/"}}}
	w := plan.Workload{Kind: "Deployment", Name: "pricing"}
	notReady := plan.PodAction{Verb: plan.PodNotReady, Pod: plan.PodRef{Workload: w, Pick: "busiest"}}
	groups := []plan.Group{{Name: "order", Clients: 2}}
	for _, tt := range []struct {
		name   string
		obj    *appsv1.Deployment
		action plan.Action
		want   string
	}{
		{"image update", probe(grpcProbe), plan.Update{Workload: w, Image: "pinlab:v2"}, "changes Deployment /pricing's image"},
		{"args update", probe(grpcProbe), plan.Update{Workload: w, Args: []string{"pod", "pricing"}}, ""},
		{"part of a group", probe(grpcProbe), plan.ConfigureClients{Clients: []plan.Client{{Name: "order-0", Group: "order"}}}, "changes 1 of client group order's 2 clients"},
		{"a whole group", probe(grpcProbe), plan.ConfigureClients{Clients: []plan.Client{{Name: "order-0", Group: "order"}, {Name: "order-1", Group: "order"}}}, ""},
		{"not ready, gRPC probe", probe(grpcProbe), notReady, ""},
		{"not ready, HTTP probe", probe(httpProbe), notReady, "has no gRPC readiness probe"},
		{"not ready, no probe", probe(nil), notReady, "has no gRPC readiness probe"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := plan.Variant{Objects: []runtime.Object{tt.obj}, Groups: groups}
			err := stepFits(v, plan.Step{Action: tt.action})
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("stepFits: %v, want %q", err, tt.want)
			}
		})
	}
}

// TestBadImage: a malformed --image is refused before any call.
func TestBadImage(t *testing.T) {
	for _, image := range []string{"UPPER/Case@sha256:abc", "http://registry.example/acme/pinlab:dev", " registry.example/p", "@sha256:abc"} {
		_, err := Run(context.Background(), Options{Scenario: "scale-out", Image: image, Kube: &evidence.Kube{Kubeconfig: filepath.Join(t.TempDir(), "none")}})
		if err == nil || !strings.Contains(err.Error(), "--image") || !strings.Contains(err.Error(), "not an image reference") {
			t.Errorf("--image %q: %v, want it refused", image, err)
		}
	}
}
