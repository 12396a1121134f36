package remote

import (
	"context"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestLease: a started variant's namespace is in use; its Lease is
// renewed while it runs; with Keep, Close releases it and the namespace
// is left, no longer in use.
func TestLease(t *testing.T) {
	cfg, cs := testConfig(t)
	cfg.Keep, cfg.LeaseRenew = true, 50*time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, ns := startVariant(ctx, t, cfg)
	leases := cs.CoordinationV1().Leases(ns)
	get := func(ctx context.Context) *coordinationv1.Lease {
		l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first := get(ctx)
	if err := wait.PollUntilContextTimeout(ctx, cfg.LeaseRenew/2, 40*cfg.LeaseRenew, false, func(ctx context.Context) (bool, error) {
		return get(ctx).Spec.RenewTime.After(first.Spec.RenewTime.Time), nil
	}); err != nil {
		t.Errorf("lease not renewed within %v of renewals every %v: %v", 40*cfg.LeaseRenew, cfg.LeaseRenew, err)
	}
	if left, err := Leftovers(ctx, cs, "", false); err != nil || len(left) != 1 || !left[0].InUse {
		t.Fatalf("while running: Leftovers = %+v, %v; want %s in use", left, err, ns)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c.(*Cluster).Err() != nil {
		t.Errorf("the variant failed: %v", c.(*Cluster).Err())
	}
	left, err := Leftovers(ctx, cs, "", true)
	if err != nil || len(left) != 1 || left[0].InUse {
		t.Errorf("after Close with Keep: Leftovers = %+v, %v; want %s left, not in use", left, err, ns)
	}
}

// TestLeaseLost: a run whose Lease is deleted under it fails the variant,
// naming the lease.
func TestLeaseLost(t *testing.T) {
	cfg, cs := testConfig(t)
	cfg.LeaseRenew = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, ns := startVariant(ctx, t, cfg)
	defer c.Close()
	if err := cs.CoordinationV1().Leases(ns).Delete(ctx, LeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.(*Cluster).Failed():
	case <-ctx.Done():
		t.Fatal("the variant did not fail after its lease was deleted")
	}
}

// TestLeftovers: which namespaces are in use, by the Lease's state; with
// observe, a lease that looks lapsed but is renewed meanwhile is in use
// (this machine's clock ahead of the runner's).
func TestLeftovers(t *testing.T) {
	run, none := "ab12cd34", ""
	three := int32(3)
	at := func(d time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(time.Now().Add(-d)); return &m }
	for _, tt := range []struct {
		name    string
		l       *coordinationv1.Lease // nil: no Lease
		created time.Duration         // how long ago the namespace was
		observe bool
		renew   bool // renew the lease while Leftovers watches
		inUse   bool
	}{
		{"renewed 1 s ago", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &three, RenewTime: at(time.Second)}}, time.Hour, false, false, true},
		{"lapsed", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &three, RenewTime: at(4 * time.Second)}}, time.Hour, false, false, false},
		{"lapsed, watched, not renewed", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &three, RenewTime: at(4 * time.Second)}}, time.Hour, true, false, false},
		{"lapsed by this clock, renewed while watched", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &three, RenewTime: at(4 * time.Second)}}, time.Hour, true, true, true},
		{"lapsed long ago", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &three, RenewTime: at(time.Hour)}}, 2 * time.Hour, true, false, false},
		{"released", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &none, LeaseDurationSeconds: &three, RenewTime: at(time.Second)}}, time.Second, false, false, false},
		{"no renew time", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &three}}, time.Hour, false, false, false},
		{"no lease, old namespace", nil, time.Hour, false, false, false},
		{"no lease yet, new namespace", nil, time.Second, false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, cs := testConfig(t)
			ns := Namespace(run, 0)
			if err := cs.Tracker().Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{RunLabel: run},
				CreationTimestamp: metav1.NewTime(time.Now().Add(-tt.created))}}); err != nil {
				t.Fatal(err)
			}
			if tt.l != nil {
				tt.l.ObjectMeta = metav1.ObjectMeta{Name: LeaseName, Namespace: ns, Labels: map[string]string{RunLabel: run}}
				if err := cs.Tracker().Add(tt.l); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			done, renewing := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(renewing)
				if !tt.renew {
					return
				}
				// Renew every 100 ms until Leftovers returns: the fake API
				// server's watch sends only what comes after it started.
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						l := tt.l.DeepCopy()
						l.Spec.RenewTime = at(0)
						_, _ = cs.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
					}
				}
			}()
			left, err := Leftovers(ctx, cs, "", tt.observe)
			close(done)
			<-renewing
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 1 || left[0].InUse != tt.inUse {
				t.Errorf("Leftovers = %+v; want in use %v", left, tt.inUse)
			}
		})
	}
}

// startVariant starts variant 0 of cfg's run (the pricing Deployment) on
// a Backend of cfg and returns it and its namespace.
func startVariant(ctx context.Context, t *testing.T, cfg Config) (runner.Cluster, string) {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := Namespace(cfg.Run, 0)
	c, err := b.Start(ctx, runner.Setup{Variant: plan.Variant{Name: "v", Objects: []runtime.Object{pricing(ns)}}})
	if err != nil {
		t.Fatal(err)
	}
	return c, ns
}
