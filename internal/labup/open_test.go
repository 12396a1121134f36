package labup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/scenariotest"
)

// TestOpenObjects: what lab up rejects before it starts anything, with the
// place to fix it.
func TestOpenObjects(t *testing.T) {
	tests := []struct {
		name    string
		file    string // manifest text; read from a file
		stdin   string // used with -f - when file is empty
		wantErr string // "" means no error
	}{
		{name: "empty file", file: "\n", wantErr: "no objects in it"},
		{name: "only a separator", file: "---\n", wantErr: "no objects in it"},
		{name: "only comments", file: "# nothing\n---\n# here\n", wantErr: "no objects in it"},
		{name: "empty stdin", stdin: " ", wantErr: "<stdin>: no objects in it"},
		{name: "Service name with an underscore", file: "apiVersion: v1\nkind: Service\nmetadata:\n  name: Bad_Name\nspec:\n  clusterIP: None\n",
			wantErr: `f.yaml:4: document 1 (Service "Bad_Name"): metadata.name: Invalid value: "Bad_Name": a DNS-1035 label`},
		{name: "Service name from stdin", stdin: "apiVersion: v1\nkind: Service\nmetadata:\n  name: Bad_Name\nspec:\n  clusterIP: None\n",
			wantErr: `<stdin>:4: document 1`},
		{name: "Namespace with dots", file: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: data.v2\n",
			wantErr: `f.yaml:4: document 1 (Namespace "data.v2"): metadata.name: Invalid value: "data.v2": must not contain dots (the API server would reject it)`},
		{name: "hostname with dots", file: scenariotest.NamespaceDoc + "---\n" + fmt.Sprintf(scenariotest.LegacyDocs, "a.b.c"),
			wantErr: `f.yaml:27: document 3 (EndpointSlice "legacy-1"): endpoints[0].hostname: Invalid value: "a.b.c": must not contain dots`},
		{name: "hostname in upper case", file: scenariotest.NamespaceDoc + "---\n" + fmt.Sprintf(scenariotest.LegacyDocs, "UPPER"),
			wantErr: `endpoints[0].hostname: Invalid value: "UPPER": a lowercase RFC 1123 label`},
		{name: "good hostname", file: scenariotest.NamespaceDoc + "---\n" + fmt.Sprintf(scenariotest.LegacyDocs, "pg-0")},
		{name: "good stdin", stdin: scenariotest.NamespaceDoc + "---\n" + fmt.Sprintf(scenariotest.LegacyDocs, "pg-0")},
		// Issue 15: what kubectl apply takes against a real API server.
		{name: "the kube-system Namespace", file: "apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system, labels: {team: platform}}\n---\n" +
			"apiVersion: v1\nkind: Service\nmetadata: {name: legacy, namespace: kube-system}\nspec:\n  clusterIP: None\n  ports: [{name: pg, port: 5432}]\n"},
		{name: "an object in kube-system without its Namespace", file: "apiVersion: v1\nkind: Service\nmetadata: {name: legacy, namespace: kube-system}\nspec:\n  clusterIP: None\n  ports: [{name: pg, port: 5432}]\n"},
		{name: "EndpointSlice before its Service", file: scenariotest.NamespaceDoc + "---\n" + strings.SplitN(fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), "---\n", 2)[1] + "---\n" + strings.SplitN(fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), "---\n", 2)[0]},
		{name: "EndpointSlice without a Service", file: scenariotest.NamespaceDoc + "---\n" + strings.SplitN(fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), "---\n", 2)[1]},
		// Issue 15: grpc-go panicked on this age once the lab ran.
		{name: "age grpc-go cannot take", file: scenariotest.NamespaceDoc + "---\n" + strings.Replace(fmt.Sprintf(scenariotest.WebDocs, "[{name: grpc, port: 8471, targetPort: grpc}]"), "args: [pod, pricing]", "args: [pod, pricing, --max-connection-age, 1ns]", 1),
			wantErr: `f.yaml:16: document 2 (Deployment "web"): spec.template.spec.containers[0].args: container "web": pod: max connection age 1ns: expected 0 (never) or at least 10ns`},
		{name: "containerPort beyond 16 bits", file: scenariotest.NamespaceDoc + "---\n" + strings.Replace(fmt.Sprintf(scenariotest.WebDocs, "[{name: grpc, port: 8471, targetPort: grpc}]"), "containerPort: 8471", "containerPort: 70000", 1),
			wantErr: `f.yaml:16: document 2 (Deployment "web"): spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535`},
		{name: "stdin larger than the cap", stdin: strings.Repeat("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n", 12<<20/52),
			wantErr: "standard input: file too large: more than 3 MiB"},
		// Issue 15's tester: 50 x 1000 replicas started, and took minutes.
		{name: "more pods than a lab runs", file: scenariotest.NamespaceDoc + "---\n" + strings.Replace(fmt.Sprintf(scenariotest.WebDocs, "[{name: grpc, port: 8471, targetPort: grpc}]"), "replicas: 1\n", "replicas: 600\n", 1) +
			"---\n" + strings.NewReplacer("replicas: 1\n", "replicas: 700\n", "name: web,", "name: web2,").Replace(strings.SplitN(scenariotest.WebDocs, "---\n", 2)[0]),
			wantErr: `(Deployment "web2"): spec.replicas: the workloads ask for 1300 pods in all, more than the 1000 a lab runs; this one has 700`},
		{name: "more objects than a lab runs", stdin: strings.Repeat("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n", 1001),
			wantErr: "<stdin>:4001: document 1001: more than 1000 objects; a lab runs at most 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Manifests: "-", In: strings.NewReader(tt.stdin)}
			if tt.file != "" {
				opts.Manifests = scenariotest.WriteFile(t, "f.yaml", tt.file)
			}
			f, err := open(context.Background(), opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tt.stdin != "" && f.Name != scenario.StdinName {
					t.Errorf("name %q, want %q", f.Name, scenario.StdinName)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestWarnings: Services lab up starts although part of them cannot work.
func TestWarnings(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{name: "TCP port", yaml: fmt.Sprintf(scenariotest.WebDocs, "[{name: grpc, port: 8471, targetPort: grpc}]")},
		{name: "UDP port on pods", yaml: fmt.Sprintf(scenariotest.WebDocs, "[{name: grpc, port: 8471, targetPort: grpc}, {name: dns, port: 53, protocol: UDP}]"),
			want: []string{`f.yaml:23: document 3 (Service "web"): spec.ports[1].protocol: UDP: the lab's pods serve TCP only and its kube-proxy relays TCP only, so nothing answers on port 53/UDP`}},
		{name: "UDP port without selector", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: dns}\nspec:\n  ports: [{name: dns, port: 53, protocol: UDP}]\n"},
		{name: "ExternalName IP", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec:\n  type: ExternalName\n  externalName: 127.0.0.55\n",
			want: []string{`f.yaml:6: document 1 (Service "db"): spec.externalName: 127.0.0.55 is an IP address: Kubernetes takes it as a DNS name of digits, and the cluster DNS answers NXDOMAIN`}},
		// Issue 15: the API server takes these; lab up says what they do.
		{name: "EndpointSlice without its Service", yaml: scenariotest.NamespaceDoc + "---\n" + strings.SplitN(fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), "---\n", 2)[1],
			want: []string{`f.yaml:11: document 2 (EndpointSlice "legacy-1"): metadata.labels: label kubernetes.io/service-name=legacy names no Service in namespace "data" in this file, so nothing uses these endpoints`}},
		{name: "EndpointSlice before its Service", yaml: scenariotest.NamespaceDoc + "---\n" + strings.SplitN(fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), "---\n", 2)[1] + "---\n" + strings.SplitN(fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), "---\n", 2)[0]},
		{name: "Service that selects no pods", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n",
			want: []string{`f.yaml:5: document 1 (Service "web"): spec.selector: selects no pods`}},
		{name: "ExternalName name", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec:\n  type: ExternalName\n  externalName: db.example.com\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(tt.yaml, "kind: Namespace") && strings.Contains(tt.yaml, "namespace: data") {
				tt.yaml = scenariotest.NamespaceDoc + "---\n" + tt.yaml
			}
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
		})
	}
}

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
			yaml:       scenariotest.WithNamespace(scenariotest.ProbeDocs, "        readinessProbe: {grpc: {port: 9999}}\n"),
			want:       []string{`f.yaml:20: document 2 (Deployment "web"): spec.template.spec.containers[0].readinessProbe.grpc.port: probes port 9999, but the server listens on 8471, so the probe would never succeed: the pods start but never turn Ready, as in Kubernetes; lab up does not wait for Deployment data/web`},
			neverReady: []lab.WorkloadRef{{Kind: "Deployment", Namespace: "data", Name: "web"}}},
		{name: "startup and liveness probes",
			yaml: scenariotest.WithNamespace(scenariotest.ProbeDocs, "        livenessProbe: {tcpSocket: {port: 9000}}\n        startupProbe: {tcpSocket: {port: 9001}}\n"),
			want: []string{
				`spec.template.spec.containers[0].livenessProbe.tcpSocket.port: probes port 9000, but the server listens on 8471, so the probe would never succeed: the kubelet restarts the container`,
				`spec.template.spec.containers[0].startupProbe.tcpSocket.port: probes port 9001, but the server listens on 8471, so the probe would never succeed: the pods start but never turn Ready`,
			},
			neverReady: []lab.WorkloadRef{{Kind: "Deployment", Namespace: "data", Name: "web"}}},
		{name: "probe on the served port", yaml: scenariotest.WithNamespace(scenariotest.ProbeDocs, "        readinessProbe: {grpc: {port: 8471}}\n")},
		{name: "dual-stack Service",
			yaml: scenariotest.WithNamespace(scenariotest.DualStackDoc, "RequireDualStack", `[127.96.0.50, "fd00:10:96::50"]`),
			want: []string{`f.yaml:11: document 2 (Service "dual"): spec.clusterIPs[1]: fd00:10:96::50 is IPv6: the cluster DNS serves it (AAAA and ip6.arpa PTR), but the lab carries IPv4 loopback traffic only`}},
		{name: "PreferDualStack without an IPv6 address",
			yaml: scenariotest.WithNamespace(scenariotest.DualStackDoc, "PreferDualStack", `[127.96.0.51]`),
			want: []string{`spec.ipFamilyPolicy: PreferDualStack: the lab allocates no IPv6 ClusterIPs, so this Service is IPv4 only`}},
		{name: "IPv6 endpoint address",
			yaml: scenariotest.NamespaceDoc + "---\n" + scenariotest.IPv6SliceDoc,
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
			_, err := open(context.Background(), Options{Manifests: scenariotest.WriteFile(t, "f.yaml", tt.yaml)})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestListenError(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantHint bool
	}{
		{name: "address in use", err: &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}, wantHint: true},
		{name: "permission denied", err: &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EACCES)}},
		{name: "not loopback", err: errors.New("loopback: refusing 10.0.0.1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := listenError(tt.err).Error()
			if strings.Contains(got, "another lab up may hold it") != tt.wantHint {
				t.Errorf("listenError = %q; hint about another lab wanted: %v", got, tt.wantHint)
			}
		})
	}
}

func TestNamespaces(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{name: "default namespace", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: None}\n", want: []string{"default"}},
		{name: "one other namespace", yaml: scenariotest.NamespaceDoc + "---\n" + fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), want: []string{"data"}},
		{name: "two namespaces", yaml: scenariotest.NamespaceDoc + "---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: None}\n---\n" + fmt.Sprintf(scenariotest.LegacyDocs, "pg-0"), want: []string{"default", "data"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := scenario.LoadObjects("f.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := namespaces(f); !slices.Equal(got, tt.want) {
				t.Errorf("namespaces = %q, want %q", got, tt.want)
			}
		})
	}
}
