package remote

import (
	"context"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestLease: a started variant's namespace is in use; its Lease is
// renewed while it runs; with Keep, Close releases it and the namespace
// is left, no longer in use.
func TestLease(t *testing.T) {
	defer func(d, r time.Duration) { leaseDuration, leaseRenew = d, r }(leaseDuration, leaseRenew)
	leaseDuration, leaseRenew = 3*time.Second, 50*time.Millisecond
	cfg, cs := testConfig(t)
	cfg.Keep = true
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := Namespace(cfg.Run, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := b.Start(ctx, runner.Setup{Variant: plan.Variant{Name: "v", Objects: []runtime.Object{pricing(ns)}}})
	if err != nil {
		t.Fatal(err)
	}
	first := leaseOf(ctx, t, cs.CoordinationV1().Leases(ns))
	err = wait.PollUntilContextTimeout(ctx, leaseRenew/2, 40*leaseRenew, false, func(ctx context.Context) (bool, error) {
		return leaseOf(ctx, t, cs.CoordinationV1().Leases(ns)).Spec.RenewTime.After(first.Spec.RenewTime.Time), nil
	})
	if err != nil {
		t.Errorf("lease not renewed within %v of renewals every %v: %v", 40*leaseRenew, leaseRenew, err)
	}
	if left, err := Leftovers(ctx, cs, ""); err != nil || len(left) != 1 || !left[0].InUse() {
		t.Fatalf("while running: Leftovers = %+v, %v; want %s in use", left, err, ns)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	left, err := Leftovers(ctx, cs, "")
	if err != nil || len(left) != 1 || left[0].InUse() {
		t.Errorf("after Close with Keep: Leftovers = %+v, %v; want %s left, not in use", left, err, ns)
	}
}

func leaseOf(ctx context.Context, t *testing.T, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}) *coordinationv1.Lease {
	t.Helper()
	l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestHeldLeases: a lease is held while its holder renewed it within its
// duration; released, lapsed, foreign or malformed ones are not.
func TestHeldLeases(t *testing.T) {
	now := time.Now()
	run, none := "ab12cd34", ""
	thirty := int32(30)
	at := func(d time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(now.Add(-d)); return &m }
	for _, tt := range []struct {
		name string
		l    coordinationv1.Lease
		held bool
	}{
		{"renewed 5 s ago", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &thirty, RenewTime: at(5 * time.Second)}}, true},
		{"lapsed", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &thirty, RenewTime: at(31 * time.Second)}}, false},
		{"released", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &none, LeaseDurationSeconds: &thirty, RenewTime: at(time.Second)}}, false},
		{"no holder", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &thirty, RenewTime: at(time.Second)}}, false},
		{"no renew time", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &thirty}}, false},
		{"no duration", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, RenewTime: at(time.Second)}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, cs := testConfig(t)
			tt.l.ObjectMeta = metav1.ObjectMeta{Name: LeaseName, Namespace: "pinlab-ab12cd34-0", Labels: map[string]string{RunLabel: run}}
			if err := cs.Tracker().Add(&tt.l); err != nil {
				t.Fatal(err)
			}
			held, err := heldLeases(t.Context(), cs, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := held["pinlab-ab12cd34-0"]; ok != tt.held {
				t.Errorf("held = %v, want %v", ok, tt.held)
			}
		})
	}
}
