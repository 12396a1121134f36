package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/pinlab/pinlab/internal/loopback"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"encoding/json"
	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/scenario"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeFile writes a manifest into the test's directory and returns its path.
func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLabUpFlags: flags are checked before anything starts.
func TestLabUpFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantTTL time.Duration // lab.Config.DNSTTL the options give
		wantErr string
	}{
		{name: "defaults", args: nil, wantTTL: 0},
		{name: "ttl 0s means TTL 0", args: []string{"--dns-ttl", "0s"}, wantTTL: -1},
		{name: "ttl 30s", args: []string{"--dns-ttl", "30s"}, wantTTL: 30 * time.Second},
		{name: "ttl 3600s", args: []string{"--dns-ttl", "1h"}, wantTTL: time.Hour},
		{name: "negative ttl", args: []string{"--dns-ttl", "-5s"}, wantErr: "--dns-ttl -5s: must not be negative"},
		{name: "kube-api without a real control plane", args: []string{"--kube-api", "127.0.0.1:6443"}, wantErr: "--kube-api 127.0.0.1:6443: only with --control-plane kubernetes"},
		{name: "ttl below a second", args: []string{"--dns-ttl", "1ms"}, wantErr: "--dns-ttl 1ms: DNS TTLs are whole seconds"},
		{name: "ttl with a fraction", args: []string{"--dns-ttl", "1.5s"}, wantErr: "whole seconds"},
		{name: "ttl above the maximum", args: []string{"--dns-ttl", "2h"}, wantErr: "above the maximum 1h0m0s"},
		{name: "control without port", args: []string{"--control", "127.0.0.1"}, wantErr: `--control "127.0.0.1": expected IP:port inside 127.0.0.0/8`},
		{name: "control not loopback", args: []string{"--control", "192.0.2.1:7471"}, wantErr: "refusing 192.0.2.1"},
		{name: "control host name", args: []string{"--control", "localhost:7471"}, wantErr: "expected IP:port"},
		{name: "bad pods mode", args: []string{"--dns-pods", "all"}, wantErr: `--dns-pods "all"`},
		{name: "real kube-proxy", args: []string{"--control-plane", "kubernetes", "--dataplane", "kube-proxy-iptables"}},
		{name: "dataplane on the embedded control plane", args: []string{"--dataplane", "kube-proxy-nftables"}, wantErr: "--dataplane kube-proxy-nftables needs --control-plane kubernetes"},
		{name: "unknown dataplane", args: []string{"--control-plane", "kubernetes", "--dataplane", "cilium"}, wantErr: `dataplane "cilium": expected pinlab,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLabUp(tt.args)
			if tt.wantErr != "" {
				var ue usageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Fatalf("error %v, want a usage error containing %q", err, tt.wantErr)
				}
				if got != nil {
					t.Error("lab up ran despite the bad flag")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := got.dnsTTL(); d != tt.wantTTL {
				t.Errorf("DNS TTL for the lab = %v, want %v", d, tt.wantTTL)
			}
		})
	}
}

const (
	nsDoc = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: data\n"
	// legacyDocs is a selector-less headless Service and its slice; %s is
	// the endpoint's hostname.
	legacyDocs = "apiVersion: v1\nkind: Service\nmetadata:\n  name: legacy\n  namespace: data\nspec:\n  clusterIP: None\n  ports:\n  - {name: pg, port: 5432}\n---\n" +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: legacy-1\n  namespace: data\n  labels: {kubernetes.io/service-name: legacy}\naddressType: IPv4\nports:\n- {name: pg, port: 5432}\nendpoints:\n- addresses: [192.0.2.10]\n  hostname: %s\n"
	// podsDocs is a Deployment of pods labelled app=web; %s is a Service
	// port list.
	webDocs = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: data}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - {name: web, image: pinlab, args: [pod, pricing], ports: [{name: grpc, containerPort: 8471}]}\n---\n" +
		"apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: data}\nspec:\n  selector: {app: web}\n  ports: %s\n"
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
		{name: "hostname with dots", file: nsDoc + "---\n" + fmt.Sprintf(legacyDocs, "a.b.c"),
			wantErr: `f.yaml:27: document 3 (EndpointSlice "legacy-1"): endpoints[0].hostname: Invalid value: "a.b.c": must not contain dots`},
		{name: "hostname in upper case", file: nsDoc + "---\n" + fmt.Sprintf(legacyDocs, "UPPER"),
			wantErr: `endpoints[0].hostname: Invalid value: "UPPER": a lowercase RFC 1123 label`},
		{name: "good hostname", file: nsDoc + "---\n" + fmt.Sprintf(legacyDocs, "pg-0")},
		{name: "good stdin", stdin: nsDoc + "---\n" + fmt.Sprintf(legacyDocs, "pg-0")},
		// Issue 15: what kubectl apply takes against a real API server.
		{name: "the kube-system Namespace", file: "apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system, labels: {team: platform}}\n---\n" +
			"apiVersion: v1\nkind: Service\nmetadata: {name: legacy, namespace: kube-system}\nspec:\n  clusterIP: None\n  ports: [{name: pg, port: 5432}]\n"},
		{name: "an object in kube-system without its Namespace", file: "apiVersion: v1\nkind: Service\nmetadata: {name: legacy, namespace: kube-system}\nspec:\n  clusterIP: None\n  ports: [{name: pg, port: 5432}]\n"},
		{name: "EndpointSlice before its Service", file: nsDoc + "---\n" + strings.SplitN(fmt.Sprintf(legacyDocs, "pg-0"), "---\n", 2)[1] + "---\n" + strings.SplitN(fmt.Sprintf(legacyDocs, "pg-0"), "---\n", 2)[0]},
		{name: "EndpointSlice without a Service", file: nsDoc + "---\n" + strings.SplitN(fmt.Sprintf(legacyDocs, "pg-0"), "---\n", 2)[1]},
		// Issue 15: grpc-go panicked on this age once the lab ran.
		{name: "age grpc-go cannot take", file: nsDoc + "---\n" + strings.Replace(fmt.Sprintf(webDocs, "[{name: grpc, port: 8471, targetPort: grpc}]"), "args: [pod, pricing]", "args: [pod, pricing, --max-connection-age, 1ns]", 1),
			wantErr: `f.yaml:16: document 2 (Deployment "web"): spec.template.spec.containers[0].args: container "web": pod: max connection age 1ns: expected 0 (never) or at least 10ns`},
		{name: "containerPort beyond 16 bits", file: nsDoc + "---\n" + strings.Replace(fmt.Sprintf(webDocs, "[{name: grpc, port: 8471, targetPort: grpc}]"), "containerPort: 8471", "containerPort: 70000", 1),
			wantErr: `f.yaml:16: document 2 (Deployment "web"): spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535`},
		{name: "stdin larger than the cap", stdin: strings.Repeat("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n", 12<<20/52),
			wantErr: "lab up: standard input: file too large: more than 3 MiB"},
		// Issue 15's tester: 50 x 1000 replicas started, and took minutes.
		{name: "more pods than a lab runs", file: nsDoc + "---\n" + strings.Replace(fmt.Sprintf(webDocs, "[{name: grpc, port: 8471, targetPort: grpc}]"), "replicas: 1\n", "replicas: 600\n", 1) +
			"---\n" + strings.NewReplacer("replicas: 1\n", "replicas: 700\n", "name: web,", "name: web2,").Replace(strings.SplitN(webDocs, "---\n", 2)[0]),
			wantErr: `(Deployment "web2"): spec.replicas: the workloads ask for 1300 pods in all, more than the 1000 a lab runs; this one has 700`},
		{name: "more objects than a lab runs", stdin: strings.Repeat("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n", 1001),
			wantErr: "<stdin>:4001: document 1001: more than 1000 objects; a lab runs at most 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := &LabUpOptions{File: "-", In: strings.NewReader(tt.stdin)}
			if tt.file != "" {
				opts.File = writeFile(t, "f.yaml", tt.file)
			}
			f, err := openObjects(context.Background(), opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tt.stdin != "" && f.Name != stdinName {
					t.Errorf("name %q, want %q", f.Name, stdinName)
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
		{name: "TCP port", yaml: fmt.Sprintf(webDocs, "[{name: grpc, port: 8471, targetPort: grpc}]")},
		{name: "UDP port on pods", yaml: fmt.Sprintf(webDocs, "[{name: grpc, port: 8471, targetPort: grpc}, {name: dns, port: 53, protocol: UDP}]"),
			want: []string{`f.yaml:23: document 3 (Service "web"): spec.ports[1].protocol: UDP: the lab's pods serve TCP only and its kube-proxy relays TCP only, so nothing answers on port 53/UDP`}},
		{name: "UDP port without selector", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: dns}\nspec:\n  ports: [{name: dns, port: 53, protocol: UDP}]\n"},
		{name: "ExternalName IP", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec:\n  type: ExternalName\n  externalName: 127.0.0.55\n",
			want: []string{`f.yaml:6: document 1 (Service "db"): spec.externalName: 127.0.0.55 is an IP address: Kubernetes takes it as a DNS name of digits, and the cluster DNS answers NXDOMAIN`}},
		// Issue 15: the API server takes these; lab up says what they do.
		{name: "EndpointSlice without its Service", yaml: nsDoc + "---\n" + strings.SplitN(fmt.Sprintf(legacyDocs, "pg-0"), "---\n", 2)[1],
			want: []string{`f.yaml:11: document 2 (EndpointSlice "legacy-1"): metadata.labels: label kubernetes.io/service-name=legacy names no Service in namespace "data" in this file, so nothing uses these endpoints`}},
		{name: "EndpointSlice before its Service", yaml: nsDoc + "---\n" + strings.SplitN(fmt.Sprintf(legacyDocs, "pg-0"), "---\n", 2)[1] + "---\n" + strings.SplitN(fmt.Sprintf(legacyDocs, "pg-0"), "---\n", 2)[0]},
		{name: "Service that selects no pods", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n",
			want: []string{`f.yaml:5: document 1 (Service "web"): spec.selector: selects no pods`}},
		{name: "ExternalName name", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec:\n  type: ExternalName\n  externalName: db.example.com\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(tt.yaml, "kind: Namespace") && strings.Contains(tt.yaml, "namespace: data") {
				tt.yaml = nsDoc + "---\n" + tt.yaml
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

func TestNamespaceFlag(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{name: "default namespace", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: None}\n", want: ""},
		{name: "one other namespace", yaml: nsDoc + "---\n" + fmt.Sprintf(legacyDocs, "pg-0"), want: " -n data"},
		{name: "two namespaces", yaml: nsDoc + "---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: None}\n---\n" + fmt.Sprintf(legacyDocs, "pg-0"), want: " -A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := scenario.LoadObjects("f.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := namespaceFlag(f); got != tt.want {
				t.Errorf("namespaceFlag = %q, want %q", got, tt.want)
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

// TestControlAddressInUse: a taken control address fails before the lab
// starts.
func TestControlAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out, errb bytes.Buffer
	opts := &LabUpOptions{File: "dns-demo", Control: ln.Addr().String(), LogLevel: "off", Pods: "disabled", Out: &out, Err: &errb}
	err = labUp(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "another lab up may hold it") {
		t.Errorf("labUp = %v, want the address-in-use hint", err)
	}
	if strings.Contains(errb.String(), "starting") {
		t.Errorf("the lab started before the control address was claimed: %q", errb.String())
	}
}

// cancelOn is a writer that cancels when it sees a string.
type cancelOn struct {
	syncBuffer
	on     string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.syncBuffer.Write(p)
	if strings.Contains(c.String(), c.on) {
		c.cancel()
	}
	return n, err
}

// TestLabUpInterrupted: Ctrl-C during start-up is an interruption, not a
// failure of whatever was still starting, and exits 130.
func TestLabUpInterrupted(t *testing.T) {
	t.Run("before start", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out, errb bytes.Buffer
		code := run(ctx, []string{"lab", "up", "-f", "dns-demo", "--control", freeAddr(t), "--token-file", filepath.Join(t.TempDir(), "token")}, &out, &errb)
		if code != ExitInterrupted || !strings.Contains(errb.String(), "interrupted while") {
			t.Errorf("exit %d, stderr %q; want %d and an interruption", code, errb.String(), ExitInterrupted)
		}
	})
	t.Run("while applying", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errb := &cancelOn{on: "starting", cancel: cancel}
		opts := &LabUpOptions{File: "dns-demo", Control: freeAddr(t), TokenFile: filepath.Join(t.TempDir(), "token"), LogLevel: "off", Pods: "disabled", Out: &syncBuffer{}, Err: errb}
		err := labUp(ctx, opts)
		if err == nil || !strings.Contains(err.Error(), "interrupted while starting the lab from builtin:dns-demo") || strings.Contains(err.Error(), "ready") {
			t.Errorf("labUp = %v; want an interruption, not what was not ready", err)
		}
	})
}

// TestLabUpFixedClusterIP: a fixed ClusterIP makes lab up claim the range
// it lies in; with that range held by another lab it says so instead of
// starting elsewhere, where the API would refuse the address.
func TestLabUpFixedClusterIP(t *testing.T) {
	lock, err := loopback.Listen(context.Background(), "127.107.0.10:10053") // range 12's claim
	if err != nil {
		t.Skipf("range 12 is in use here: %v", err)
	}
	defer lock.Close()
	file := writeFile(t, "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: fixed\nspec:\n  clusterIP: 127.107.0.5\n  ports:\n  - {name: grpc, port: 8471}\n")
	opts := &LabUpOptions{File: file, Control: freeAddr(t), TokenFile: filepath.Join(t.TempDir(), "token"), LogLevel: "off", Pods: "disabled", Out: &syncBuffer{}, Err: &syncBuffer{}}
	err = labUp(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "address range 12 is in use by another lab") {
		t.Errorf("labUp = %v; want range 12 in use", err)
	}
}

// fakeLab serves objs as a lab's control API would to the holder of the
// token it writes to tokenFile.
func fakeLab(t *testing.T, objs control.Objects) (addr, tokenFile string) {
	token := control.NewToken()
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := control.WriteToken(tokenFile, token, true); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(control.Header, "v1")
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(objs)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), tokenFile
}

// TestLabGetNamespaces: lab get shows one namespace, or all with -A, and
// says so when there is nothing, as kubectl does.
func TestLabGetNamespaces(t *testing.T) {
	now := metav1.Now()
	svc := func(ns, name string) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: now},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None"}}
	}
	addr, tokenFile := fakeLab(t, control.Objects{Services: []corev1.Service{svc("data", "db"), svc("kube-system", "kube-dns")}})
	tests := []struct {
		name       string
		args       []string
		wantNames  []string // Service names in the output
		wantStderr string
	}{
		{name: "namespace with objects", args: []string{"svc", "-n", "data"}, wantNames: []string{"db"}},
		{name: "empty namespace", args: []string{"svc,pods"}, wantStderr: "No resources found in default namespace.\n"},
		{name: "empty kind in a namespace with others", args: []string{"pods", "-n", "data"}, wantStderr: "No resources found in data namespace.\n"},
		{name: "only kinds with objects are printed", args: []string{"pods,svc", "-n", "data"}, wantNames: []string{"db"}},
		{name: "all namespaces", args: []string{"svc", "-A"}, wantNames: []string{"db", "kube-dns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			cmd := NewCmdLabGet(&out, &errb)
			cmd.SetArgs(append(tt.args, "--control", addr, "--token-file", tokenFile))
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			var names []string
			for i, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if f := strings.Fields(line); i > 0 && len(f) > 1 {
					names = append(names, f[1])
				}
			}
			if diff := cmp.Diff(tt.wantNames, names); diff != "" {
				t.Errorf("names (-want +got):\n%s\noutput:\n%s", diff, out.String())
			}
			if errb.String() != tt.wantStderr {
				t.Errorf("stderr %q, want %q", errb.String(), tt.wantStderr)
			}
		})
	}
}

// parseLabUp runs lab up's flag and argument checks on args and returns
// the options it would have started with (nil if it would not start).
func parseLabUp(args []string) (*LabUpOptions, error) {
	var got *LabUpOptions
	cmd := NewCmdLabUp(&bytes.Buffer{}, &bytes.Buffer{}, func(_ context.Context, o *LabUpOptions) error {
		got = o
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	return got, err
}
