package kubelab

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// TestHostUses: a range the host reaches its nameserver or its cluster's
// API server in is the host's to use; an unreachable route would cut it
// off.
func TestHostUses(t *testing.T) {
	tests := []struct {
		name     string
		resolv   string
		kubeHost string
		prefix   string
		wantUsed bool
	}{
		{name: "a nameserver elsewhere", resolv: "nameserver 192.0.2.53\n", prefix: "10.96.0.0/16"},
		{name: "the cluster DNS as nameserver", resolv: "search default.svc.cluster.local\nnameserver 10.96.0.10\n", prefix: "10.96.0.0/16", wantUsed: true},
		{name: "in a pod of a cluster", kubeHost: "10.96.0.1", prefix: "10.96.0.0/16", wantUsed: true},
		{name: "in a pod, the pod range", kubeHost: "10.96.0.1", resolv: "nameserver 10.96.0.10\n", prefix: "10.244.0.0/16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "resolv.conf")
			if err := os.WriteFile(path, []byte(tt.resolv), 0o644); err != nil {
				t.Fatal(err)
			}
			orig := resolvConf
			resolvConf = path
			t.Cleanup(func() { resolvConf = orig })
			t.Setenv("KUBERNETES_SERVICE_HOST", tt.kubeHost)
			if got := hostUses(netip.MustParsePrefix(tt.prefix)); (got != "") != tt.wantUsed {
				t.Errorf("hostUses(%s) = %q, want used: %v", tt.prefix, got, tt.wantUsed)
			}
		})
	}
}

// TestRoutesHeld: the routes are held while a holder runs; the files of
// holders that are gone are removed.
func TestRoutesHeld(t *testing.T) {
	dir := t.TempDir()
	orig := routeHolders
	routeHolders = dir
	t.Cleanup(func() { routeHolders = orig })
	if routesHeld() {
		t.Fatal("held with no holder")
	}
	me, err := holdRoutes()
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(dir, "999999999")
	if err := os.WriteFile(gone, []byte("999999999 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !routesHeld() {
		t.Error("not held while this process holds them")
	}
	if exists(gone) {
		t.Error("the holder file of a process that is gone is left")
	}
	os.Remove(me)
	if routesHeld() {
		t.Error("held after the last holder gave up")
	}
}
