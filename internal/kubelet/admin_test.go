package kubelet

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/pod"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const adminToken = "a-token-from-a-secret-1234"

// adminPod asks for the admin endpoint on 9099 with the token of Secret
// run-token, and probes readiness through pinlab.readiness.
func adminPod(p *corev1.Pod) {
	c := &p.Spec.Containers[0]
	c.Env = []corev1.EnvVar{
		{Name: pod.AdminPortEnv, Value: "9099"},
		{Name: pod.TokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "run-token"}, Key: "token"}}},
	}
	svc := "pinlab.readiness"
	c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471, Service: &svc}}}
}

// TestAdminEndpoint: a pod that asks for the admin endpoint, as the pinlab
// image's pods do, gets it from the lab's kubelet: its readiness probe
// follows /ready, and /kill restarts it.
func TestAdminEndpoint(t *testing.T) {
	c, _, _ := node(t, Config{RestartBackoff: 100 * time.Millisecond})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "run-token", Namespace: "default"}, Data: map[string][]byte{"token": []byte(adminToken)}}
	if _, err := c.Client().CoreV1().Secrets("default").Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, c, "admin", adminPod)
	p := waitPod(t, c, "admin", "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
	base := "http://" + p.Status.PodIP + ":9099"
	post := func(path, token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		hc := http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/ready?to=false", "wrong-token-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	if code := post("/ready?to=false", adminToken); code != http.StatusNoContent {
		t.Fatalf("/ready?to=false: %d", code)
	}
	waitPod(t, c, "admin", "not Ready", func(p *corev1.Pod, err error) bool { return err == nil && !cluster.IsPodReady(p) })
	post("/ready?to=true", adminToken)
	waitPod(t, c, "admin", "Ready again", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
	if code := post("/kill", adminToken); code != http.StatusNoContent {
		t.Fatalf("/kill: %d", code)
	}
	waitPod(t, c, "admin", "restarted", func(p *corev1.Pod, err error) bool {
		return err == nil && cluster.IsPodReady(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
}

// TestAdminEndpointRefused: a token too short, or from a missing Secret,
// keeps the container from starting, with the reason.
func TestAdminEndpointRefused(t *testing.T) {
	tests := []struct {
		name string
		env  []corev1.EnvVar
		want string
	}{
		{name: "a short token", env: []corev1.EnvVar{{Name: pod.AdminPortEnv, Value: "9099"}, {Name: pod.TokenEnv, Value: "short"}}, want: "has 5 characters, fewer than 16"},
		{name: "no Secret", env: []corev1.EnvVar{{Name: pod.AdminPortEnv, Value: "9099"}, {Name: pod.TokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "token"}}}}, want: `secret "nope"`},
		{name: "a bad port", env: []corev1.EnvVar{{Name: pod.AdminPortEnv, Value: "http"}, {Name: pod.TokenEnv, Value: adminToken}}, want: `"http" is not a TCP port`},
	}
	c, _, _ := node(t, Config{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := []string{"short", "nosecret", "badport"}[i]
			createPod(t, c, name, func(p *corev1.Pod) { p.Spec.Containers[0].Env = tt.env })
			waitPod(t, c, name, "the reason", func(p *corev1.Pod, err error) bool {
				if err != nil || len(p.Status.ContainerStatuses) == 0 {
					return false
				}
				st := p.Status.ContainerStatuses[0]
				msg := ""
				if st.State.Terminated != nil {
					msg = st.State.Terminated.Message
				}
				if st.LastTerminationState.Terminated != nil {
					msg += st.LastTerminationState.Terminated.Message
				}
				if st.State.Waiting != nil {
					msg += st.State.Waiting.Message
				}
				return strings.Contains(msg, tt.want)
			})
		})
	}
}
