package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDiagnosePromFlags: --prometheus-family (auto by default) and
// --prometheus-labels reach the options.
func TestDiagnosePromFlags(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		family string
		labels map[string]string
	}{
		{name: "defaults", args: []string{"pricing", "--prometheus", "http://localhost:9090"}, family: "auto"},
		{name: "family and labels", args: []string{"pricing", "--prometheus", "http://localhost:9090", "--prometheus-family", "istio",
			"--prometheus-labels", "namespace=kubernetes_namespace,pod=kubernetes_pod_name"},
			family: "istio", labels: map[string]string{"namespace": "kubernetes_namespace", "pod": "kubernetes_pod_name"}},
		{name: "pod label only", args: []string{"pricing", "--prometheus", "http://localhost:9090", "--prometheus-family", "go-grpc", "--prometheus-labels", "pod=pod_name"},
			family: "go-grpc", labels: map[string]string{"pod": "pod_name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseDiagnose(t, tt.args)
			if got.PrometheusFamily != tt.family {
				t.Errorf("family %q, want %q", got.PrometheusFamily, tt.family)
			}
			if diff := cmp.Diff(tt.labels, got.PrometheusLabels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDiagnosePromFlagsBadInput: a family or labels Prometheus cannot be
// asked with are usage errors that name the flag.
func TestDiagnosePromFlagsBadInput(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{name: "unknown family", args: []string{"--prometheus-family", "envoy"},
			stderr: `--prometheus-family: prometheus: unknown metric family "envoy": want auto, grpc-java, go-grpc, otel, istio or linkerd`},
		{name: "other role", args: []string{"--prometheus-labels", "service=svc"},
			stderr: "--prometheus-labels: prometheus: service=svc: the target labels are namespace=LABEL and pod=LABEL"},
		{name: "not a label name", args: []string{"--prometheus-labels", "pod=k8s.pod.name"},
			stderr: `--prometheus-labels: prometheus: target label "k8s.pod.name": want a label name`},
		{name: "no value", args: []string{"--prometheus-labels", "pod"}, stderr: `"--prometheus-labels"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"diagnose", "pricing", "--lab", "--control", freeAddr(t), "--prometheus", "http://localhost:1"}, tt.args...)
			if code := Main(args, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), ExitUsage, tt.stderr)
			}
		})
	}
}

// TestDiagnosePromFlagsQueries: the family and labels reach the queries
// diagnose runs (shown with -v), against a Prometheus that has no series.
func TestDiagnosePromFlagsQueries(t *testing.T) {
	podtest.Start(t, pod.Config{Name: "pricing-0", Addr: netip.MustParseAddrPort("127.203.217.1:8471")})
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pricing-0", Namespace: "shop", Labels: map[string]string{"app": "pricing"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pricing", Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}}}}},
		Status:     corev1.PodStatus{PodIP: "127.203.217.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	addr, tokenFile := fakeLab(t, control.Objects{Services: []corev1.Service{*diagService("pricing", "127.96.0.21")}, Pods: []corev1.Pod{p}})
	tests := []struct {
		name string
		args []string
		want []string // queries run, in order
	}{
		{name: "istio with labels", args: []string{"--prometheus-family", "istio", "--prometheus-labels", "namespace=kubernetes_namespace,pod=kubernetes_pod_name"},
			want: []string{
				`sum by (kubernetes_pod_name) (increase(istio_requests_total{kubernetes_namespace="shop",kubernetes_pod_name=~"pricing-0",reporter="destination",request_protocol="grpc"}[100ms]))`,
				`sum by (kubernetes_pod_name) (increase(istio_requests_total{kubernetes_namespace="shop",kubernetes_pod_name=~"pricing-0",reporter="destination",request_protocol="grpc",grpc_response_status!="0"}[100ms]))`,
				`count by (kubernetes_pod_name) (last_over_time(istio_requests_total{kubernetes_namespace="shop",kubernetes_pod_name=~"pricing-0",reporter="destination",request_protocol="grpc"}[5m]))`,
			}},
		{name: "auto", want: []string{
			`count by (pod) (last_over_time(grpc_server_handled_total{`,
			`count by (pod) (last_over_time(grpc_server_started_total{`,
			`count by (pod) (last_over_time(grpc_server_call_started_total{`,
			`count by (pod) (last_over_time(istio_requests_total{`,
			`count by (pod) (last_over_time(request_total{`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prom, ran := emptyPrometheus(t)
			args := append([]string{"diagnose", "pricing", "-n", "shop", "--lab", "--control", addr, "--token-file", tokenFile,
				"--window", "100ms", "--prometheus", prom, "-v"}, tt.args...)
			var out, errb bytes.Buffer
			code := Main(args, &out, &errb)
			got := ran()
			if len(got) != len(tt.want) {
				t.Fatalf("exit %d, ran %q, stderr %q; want %d queries", code, got, errb.String(), len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) || !strings.Contains(errb.String(), "prometheus query: "+got[i]+"\n") {
					t.Errorf("query %d %q, want it to start with %q and be shown (stderr %q)", i, got[i], w, errb.String())
				}
			}
		})
	}
}

// emptyPrometheus is a Prometheus HTTP API that has no series; ran
// returns the queries it was asked.
func emptyPrometheus(t *testing.T) (url string, ran func() []string) {
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		mu.Lock()
		queries = append(queries, r.Form.Get("query"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": []any{}}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), queries...)
	}
}
