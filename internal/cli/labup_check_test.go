package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/scenariotest"

	"encoding/json"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/control"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pinlab/pinlab/internal/labtest"
)

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
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !exit.IsUsage(err) {
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
	labtest.Buffer
	on     string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.Buffer.Write(p)
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
		opts := &LabUpOptions{File: "dns-demo", Control: freeAddr(t), TokenFile: filepath.Join(t.TempDir(), "token"), LogLevel: "off", Pods: "disabled", Out: &labtest.Buffer{}, Err: errb}
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
	file := scenariotest.WriteFile(t, "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: fixed\nspec:\n  clusterIP: 127.107.0.5\n  ports:\n  - {name: grpc, port: 8471}\n")
	opts := &LabUpOptions{File: file, Control: freeAddr(t), TokenFile: filepath.Join(t.TempDir(), "token"), LogLevel: "off", Pods: "disabled", Out: &labtest.Buffer{}, Err: &labtest.Buffer{}}
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

func TestNamespaceFlag(t *testing.T) {
	tests := []struct {
		name string
		nss  []string
		want string
	}{
		{name: "default namespace", nss: []string{"default"}, want: ""},
		{name: "no namespace", nss: nil, want: ""},
		{name: "one other namespace", nss: []string{"data"}, want: " -n data"},
		{name: "two namespaces", nss: []string{"default", "data"}, want: " -A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := namespaceFlag(tt.nss); got != tt.want {
				t.Errorf("namespaceFlag(%q) = %q, want %q", tt.nss, got, tt.want)
			}
		})
	}
}
