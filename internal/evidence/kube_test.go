package evidence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/evidence"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeAPI answers the three lists Kube makes, as kube-apiserver would for
// a user allowed only namespace shop (cluster-wide pods are Forbidden),
// or Forbidden for everything when denyAll. Each request's Impersonate-User
// header is sent to impersonated if it is not nil.
func fakeAPI(t *testing.T, denyAll bool, impersonated ...chan<- string) string {
	forbidden := func(w http.ResponseWriter, what string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonForbidden, Code: 403,
			Message: fmt.Sprintf(`%s is forbidden: User "bob" cannot list resource`, what)})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, c := range impersonated {
			select {
			case c <- r.Header.Get("Impersonate-User"):
			default:
			}
		}
		var v any
		switch r.URL.Path {
		case "/api/v1/namespaces/shop/services":
			v = corev1.ServiceList{Items: []corev1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"}}}}
		case "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices":
			v = discoveryv1.EndpointSliceList{}
		case "/api/v1/namespaces/shop/pods":
			v = corev1.PodList{Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "pricing-0", Namespace: "shop"}, Status: corev1.PodStatus{PodIP: "10.1.0.7"}}}}
		case "/api/v1/pods":
			forbidden(w, "pods")
			return
		default:
			http.NotFound(w, r)
			return
		}
		if denyAll {
			forbidden(w, r.URL.Path)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func kubeconfig(t *testing.T, local, denied string) string {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q}
- name: denied
  cluster: {server: %q}
- name: remote
  cluster: {server: "https://10.0.0.1:6443"}
users:
- name: bob
  user: {token: abc}
- name: alice
  user: {token: def}
contexts:
- name: local
  context: {cluster: local, user: bob}
- name: denied
  context: {cluster: denied, user: bob}
- name: remote
  context: {cluster: remote, user: bob, namespace: shop}
current-context: remote
`, local, denied)
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKube: client-go's loading rules pick the file and context;
// impersonation reaches the API server; RBAC that forbids cluster-wide
// pods falls back to the namespace; one that forbids the Services says so.
// (No real API server here: this is the fake's answers through the real
// client-go.)
func TestKube(t *testing.T) {
	impersonated := make(chan string, 1)
	path := kubeconfig(t, fakeAPI(t, false, impersonated), fakeAPI(t, true))
	tests := []struct {
		name, context string
		env           string // KUBECONFIG
		kubeconfig    string
		as            string
		pods          int
		err           string
	}{
		{name: "named context", kubeconfig: path, context: "local", pods: 1},
		{name: "KUBECONFIG", env: path, context: "local", pods: 1},
		{name: "impersonating", kubeconfig: path, context: "local", as: "system:serviceaccount:shop:diagnose", pods: 1},
		{name: "unknown context", kubeconfig: path, context: "nope", err: `context "nope"`},
		{name: "RBAC", kubeconfig: path, context: "denied", err: "forbids list services"},
		// client-go reads a kubeconfig whole: /dev/zero took 23.9 GB.
		{name: "a device", kubeconfig: "/dev/zero", err: "kubeconfig /dev/zero: not a regular file"},
		{name: "a device through KUBECONFIG", env: "/dev/zero", err: "kubeconfig /dev/zero: not a regular file"},
		{name: "too large", kubeconfig: bigFile(t), err: "more than the 16 MiB a kubeconfig may have"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			for len(impersonated) > 0 {
				<-impersonated
			}
			k := &evidence.Kube{Kubeconfig: tt.kubeconfig, Context: tt.context, Namespace: "shop", As: tt.as}
			o, err := k.Objects(context.Background())
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil || len(o.Pods) != tt.pods || len(o.Services) != 1 {
				t.Errorf("objects %d pods, %d services, %v; want %d pods, 1 service", len(o.Pods), len(o.Services), err, tt.pods)
			}
			if got := <-impersonated; got != tt.as {
				t.Errorf("Impersonate-User %q, want %q", got, tt.as)
			}
			if ns, name, ok := k.PodByIP(netip.MustParseAddr("10.1.0.7")); !ok || ns != "shop" || name != "pricing-0" {
				t.Errorf("PodByIP(10.1.0.7) = %q, %q, %v; want shop, pricing-0", ns, name, ok)
			}
		})
	}
}

// TestKubeLoad: Load takes the server the kubeconfig names, wherever it
// is, without contacting it; the namespace defaults as kubectl's -n does
// (the context's, else "default"); --cluster and --user replace the
// context's.
func TestKubeLoad(t *testing.T) {
	path := kubeconfig(t, "https://127.0.0.1:1", "https://127.0.0.1:2")
	tests := []struct {
		name                        string
		context, cluster, namespace string
		host, ns                    string
	}{
		{name: "remote server, its context's namespace", host: "https://10.0.0.1:6443", ns: "shop"},
		{name: "namespace given", namespace: "other", host: "https://10.0.0.1:6443", ns: "other"},
		{name: "context without namespace", context: "local", host: "https://127.0.0.1:1", ns: "default"},
		{name: "cluster replaced", context: "local", cluster: "denied", host: "https://127.0.0.1:2", ns: "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			k := &evidence.Kube{Kubeconfig: path, Context: tt.context, Cluster: tt.cluster, Namespace: tt.namespace}
			host, err := k.Load()
			if err != nil || host != tt.host || k.Namespace != tt.ns || k.InCluster() || k.Config().Host != tt.host {
				t.Errorf("Load() = %q, %v, namespace %q, in-cluster %v; want %q, namespace %q, not in-cluster", host, err, k.Namespace, k.InCluster(), tt.host, tt.ns)
			}
		})
	}
	k := &evidence.Kube{Kubeconfig: path, User: "carol"}
	if _, err := k.Load(); err == nil || !strings.Contains(err.Error(), `"carol"`) {
		t.Errorf("an unknown --user: %v, want an error naming it", err)
	}
}

// bigFile is a sparse file one byte over the kubeconfig limit.
func bigFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(16<<20 + 1); err != nil {
		t.Fatal(err)
	}
	return p
}
