package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/scenario"
	corev1 "k8s.io/api/core/v1"
)

// Manifests for the warning cases: a Deployment whose pods have one probe
// (%s: its YAML, 8 spaces in), dual-stack Services and an IPv6 slice.
const (
	probeDocs = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: data}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - name: web\n        image: pinlab\n        args: [pod, pricing]\n        ports: [{name: grpc, containerPort: 8471}]\n%s"
	dualDoc   = "apiVersion: v1\nkind: Service\nmetadata: {name: dual, namespace: data}\nspec:\n  ipFamilyPolicy: %s\n  clusterIPs: %s\n  ports: [{name: pg, port: 5432}]\n"
	slice6Doc = "apiVersion: v1\nkind: Service\nmetadata: {name: legacy6, namespace: data}\nspec:\n  clusterIP: None\n  ports: [{name: pg, port: 5432}]\n---\n" +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: legacy6-1\n  namespace: data\n  labels: {kubernetes.io/service-name: legacy6}\naddressType: IPv6\nendpoints:\n- addresses: [\"2001:db8::10\"]\n"
)

// TestLabUpWarnings: what lab up starts, as Kubernetes would, but warns
// about at the field: probes that can never succeed and IPv6 addresses
// the lab cannot carry; and which workloads it then does not wait for.
func TestLabUpWarnings(t *testing.T) {
	tests := []struct {
		name       string
		yaml       string
		want       []string
		neverReady []lab.WorkloadRef
	}{
		{name: "readiness probe on a port nothing listens on",
			yaml:       sprintfDoc(probeDocs, "        readinessProbe: {grpc: {port: 9999}}\n"),
			want:       []string{`f.yaml:20: document 2 (Deployment "web"): spec.template.spec.containers[0].readinessProbe.grpc.port: probes port 9999, but the server listens on 8471, so the probe would never succeed: the pods start but never turn Ready, as in Kubernetes; lab up does not wait for Deployment data/web`},
			neverReady: []lab.WorkloadRef{{Kind: "Deployment", Namespace: "data", Name: "web"}}},
		{name: "startup and liveness probes",
			yaml: sprintfDoc(probeDocs, "        livenessProbe: {tcpSocket: {port: 9000}}\n        startupProbe: {tcpSocket: {port: 9001}}\n"),
			want: []string{
				`spec.template.spec.containers[0].livenessProbe.tcpSocket.port: probes port 9000, but the server listens on 8471, so the probe would never succeed: the kubelet restarts the container`,
				`spec.template.spec.containers[0].startupProbe.tcpSocket.port: probes port 9001, but the server listens on 8471, so the probe would never succeed: the pods start but never turn Ready`,
			},
			neverReady: []lab.WorkloadRef{{Kind: "Deployment", Namespace: "data", Name: "web"}}},
		{name: "probe on the served port", yaml: sprintfDoc(probeDocs, "        readinessProbe: {grpc: {port: 8471}}\n")},
		{name: "dual-stack Service",
			yaml: sprintfDoc(dualDoc, "RequireDualStack", `[127.96.0.50, "fd00:10:96::50"]`),
			want: []string{`f.yaml:11: document 2 (Service "dual"): spec.clusterIPs[1]: fd00:10:96::50 is IPv6: the cluster DNS serves it (AAAA and ip6.arpa PTR), but the lab carries IPv4 loopback traffic only`}},
		{name: "PreferDualStack without an IPv6 address",
			yaml: sprintfDoc(dualDoc, "PreferDualStack", `[127.96.0.51]`),
			want: []string{`spec.ipFamilyPolicy: PreferDualStack: the lab allocates no IPv6 ClusterIPs, so this Service is IPv4 only`}},
		{name: "IPv6 endpoint address",
			yaml: nsDoc + "---\n" + slice6Doc,
			want: []string{`document 3 (EndpointSlice "legacy6-1"): endpoints[0].addresses[0]: 2001:db8::10 is IPv6: the cluster DNS serves it`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := scenario.LoadObjects("f.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range warnings(f) {
				got = append(got, w.Error())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("warning %q does not contain %q", got[i], tt.want[i])
				}
			}
			if diff := cmp.Diff(tt.neverReady, neverReady(f)); diff != "" {
				t.Errorf("workloads not waited for (-want +got):\n%s", diff)
			}
		})
	}
}

// sprintfDoc puts the namespace document before a manifest with one
// argument filled in.
func sprintfDoc(format string, args ...any) string {
	return nsDoc + "---\n" + strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n"
}

// TestDualStackRefusedAtField: what the lab cannot give a dual-stack
// Service is an error at its field before anything starts.
func TestDualStackRefusedAtField(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{name: "RequireDualStack without an IPv6 address",
			yaml:    "apiVersion: v1\nkind: Service\nmetadata: {name: dual}\nspec:\n  ipFamilyPolicy: RequireDualStack\n  ports: [{name: pg, port: 5432}]\n",
			wantErr: `f.yaml:5: document 1 (Service "dual"): spec.ipFamilyPolicy: Invalid value: "RequireDualStack": the lab allocates no IPv6 ClusterIPs`},
		{name: "two IPv4 ClusterIPs",
			yaml:    "apiVersion: v1\nkind: Service\nmetadata: {name: dual}\nspec:\n  clusterIPs: [127.96.0.50, 127.96.0.51]\n  ports: [{name: pg, port: 5432}]\n",
			wantErr: `spec.clusterIPs[1]: Invalid value: "127.96.0.51": must be an IPv6 address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := openObjects(context.Background(), &LabUpOptions{File: writeFile(t, "f.yaml", tt.yaml)})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestLabUpStartsNeverReadyPods: lab up starts a Deployment whose
// readiness probe can never pass, warns at the field and serves; the pod
// stays not Ready, as in Kubernetes.
func TestLabUpStartsNeverReadyPods(t *testing.T) {
	path := writeFile(t, "never.yaml", sprintfDoc(probeDocs, "        readinessProbe: {grpc: {port: 9999}, periodSeconds: 1}\n"))
	ctl, errb := upLabFile(t, path)
	if !strings.Contains(errb.String(), "warning: ") || !strings.Contains(errb.String(), "readinessProbe.grpc.port: probes port 9999") {
		t.Errorf("no warning at the probe's field:\n%s", errb)
	}
	var pod corev1.Pod
	labtest.WaitFor(t, 30*time.Second, "web's pod running", func() bool {
		objs, err := ctl.Objects(context.Background())
		if err != nil || len(objs.Pods) != 1 {
			return false
		}
		pod = objs.Pods[0]
		return pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	})
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			t.Errorf("pod %s is Ready; its probe targets a port nothing listens on", pod.Name)
		}
	}
}

// upLabFile runs `pinlab lab up -f path` until the test ends and returns a
// client of its control API once it serves, and its standard error.
func upLabFile(t *testing.T, path string) (*control.Client, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errb := &syncBuffer{}, &syncBuffer{}
	opts := &LabUpOptions{File: path, Control: freeAddr(t), LogLevel: "off", Pods: "disabled", Out: out, Err: errb}
	done := make(chan error, 1)
	go func() { done <- labUp(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("lab up: %v", err)
		}
	})
	c := &control.Client{Addr: opts.Control}
	var stopped error
	labtest.WaitFor(t, 60*time.Second, "lab up serving its control API", func() bool {
		select {
		case stopped = <-done:
			done <- stopped // for the cleanup
			return true
		default:
		}
		_, err := c.Info(context.Background())
		return err == nil
	})
	if stopped != nil {
		t.Fatalf("lab up stopped: %v\n%s", stopped, errb)
	}
	return c, errb
}
