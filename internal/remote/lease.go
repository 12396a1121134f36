package remote

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// LeaseName is the Lease a run renews in each of its namespaces while it
// uses them, as a kubelet renews its node's Lease: HolderIdentity is the
// run's ID, RenewTime is renewed every Config.LeaseRenew, and
// LeaseDurationSeconds (three renewals) says how long one holds. A run
// that ends with --keep releases it (no holder). cluster clean leaves the
// namespaces of a run whose Lease is held, unless told that run by name.
const LeaseName = "pinlab-run"

// DefaultLeaseRenew is Config.LeaseRenew's default: a killed run's
// namespaces are free 30 s after its last renewal.
const DefaultLeaseRenew = 10 * time.Second

// leaseHolds is how many renewals one renewal holds for: a run whose
// API calls are slow for a renewal or two keeps its lease.
const leaseHolds = 3

// holdLease creates the namespace's Lease, held by the run, and starts
// its renewal: one goroutine, owned by c, that ends when c.stop closes;
// c.leaseDone closes after it.
func (c *Cluster) holdLease(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	secs := int32((leaseHolds*c.cfg.LeaseRenew + time.Second - 1) / time.Second) // whole seconds, rounded up
	run := c.cfg.Run
	_, err := c.cfg.Clientset.CoordinationV1().Leases(c.namespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Labels: map[string]string{RunLabel: run}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create lease %s/%s: %w", c.namespace, LeaseName, err)
	}
	c.leaseDone = make(chan struct{})
	go c.renewLease()
	return nil
}

// renewLease renews the Lease every LeaseRenew until c.stop closes. A
// failed renewal is logged and tried again at the next tick; when the
// lease is gone, or the last renewal is so old that the lease is about to
// lapse (cluster clean would then take the namespace), the variant fails.
func (c *Cluster) renewLease() {
	defer close(c.leaseDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // ends the renewal in flight when stop closes
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	every := c.cfg.LeaseRenew
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			err := c.updateLease(ctx, func(s *coordinationv1.LeaseSpec) {
				now := metav1.NewMicroTime(time.Now())
				s.RenewTime = &now
			})
			switch {
			case err == nil:
				last = time.Now()
			case ctx.Err() != nil:
				return
			case apierrors.IsNotFound(err):
				c.fail(fmt.Errorf("lease %s/%s is gone (was the namespace deleted?): the run no longer holds its namespace", c.namespace, LeaseName))
			default:
				c.cfg.logger().Warn("lease not renewed", "namespace", c.namespace, "err", err)
				if since := time.Since(last); since >= (leaseHolds-1)*every {
					c.fail(fmt.Errorf("lease %s/%s not renewed for %v (%w): cluster clean could take the namespace", c.namespace, LeaseName, since.Round(time.Second), err))
				}
			}
		}
	}
}

// releaseLease gives the Lease up (no holder): the run no longer uses
// the namespace it leaves (--keep).
func (c *Cluster) releaseLease() error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return c.updateLease(ctx, func(s *coordinationv1.LeaseSpec) { s.HolderIdentity = nil })
}

// updateLease reads the Lease, changes its spec and writes it back, in at
// most adminTimeout.
func (c *Cluster) updateLease(ctx context.Context, change func(*coordinationv1.LeaseSpec)) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	leases := c.cfg.Clientset.CoordinationV1().Leases(c.namespace)
	l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	change(&l.Spec)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// lease is what Leftovers reads of a namespace's Lease.
type lease struct {
	held    bool          // it has a holder, a renew time and a duration
	renewed time.Time     // RenewTime, by the runner's clock
	holds   time.Duration // LeaseDurationSeconds
}

// runLeases returns, by namespace, every run's Lease (listed by RunLabel
// in every namespace), and the list's resourceVersion.
func runLeases(ctx context.Context, cs kubernetes.Interface) (map[string]lease, string, error) {
	list, err := cs.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: RunLabel})
	if err != nil {
		return nil, "", err
	}
	out := map[string]lease{}
	for _, l := range list.Items {
		if l.Name != LeaseName {
			continue
		}
		s := l.Spec
		if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			out[l.Namespace] = lease{}
			continue
		}
		out[l.Namespace] = lease{held: true, renewed: s.RenewTime.Time, holds: time.Duration(*s.LeaseDurationSeconds) * time.Second}
	}
	return out, list.ResourceVersion, nil
}

// renewedWithin watches the run Leases listed at resourceVersion rv for
// d and returns which of namespaces had their Lease renewed meanwhile:
// runs in progress, however far this machine's clock is from the
// runner's. The error is ctx's, if it ended.
func renewedWithin(ctx context.Context, cs kubernetes.Interface, rv string, namespaces map[string]bool, d time.Duration) (map[string]bool, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w, err := cs.CoordinationV1().Leases(metav1.NamespaceAll).Watch(wctx, metav1.ListOptions{LabelSelector: RunLabel, ResourceVersion: rv})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	renewed := map[string]bool{}
	for {
		select {
		case <-wctx.Done():
			return renewed, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return renewed, ctx.Err()
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if isLease && ev.Type == watch.Modified && namespaces[l.Namespace] && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				renewed[l.Namespace] = true
				if len(renewed) == len(namespaces) {
					return renewed, nil
				}
			}
		}
	}
}
