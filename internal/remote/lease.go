package remote

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LeaseName is the Lease a run renews in each of its namespaces while it
// uses them, as a kubelet renews its node's Lease: HolderIdentity is the
// run's ID, RenewTime is renewed every leaseRenew, LeaseDurationSeconds
// says how long a renewal holds. A run that ends with --keep releases it
// (no holder). cluster clean leaves the namespaces of a run whose Lease
// is held, unless told that run by name.
const LeaseName = "pinlab-run"

// leaseDuration is how long one renewal holds: a run killed without
// cleaning up is seen as gone this long after its last renewal. It is
// three renewals, so that one slow API call does not make a live run
// look dead. Variables for tests.
var (
	leaseDuration = 30 * time.Second
	leaseRenew    = 10 * time.Second
)

// holdLease creates the namespace's Lease, held by the run, and starts
// its renewal: one goroutine, owned by c, that ends when c.stop closes;
// c.leaseDone closes after it.
func (c *Cluster) holdLease(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	secs := int32(leaseDuration / time.Second)
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

// renewLease renews the Lease every leaseRenew until c.stop closes. A
// failed renewal is logged; the next one tries again.
func (c *Cluster) renewLease() {
	defer close(c.leaseDone)
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if err := c.updateLease(func(s *coordinationv1.LeaseSpec) {
				now := metav1.NewMicroTime(time.Now())
				s.RenewTime = &now
			}); err != nil {
				c.cfg.logger().Warn("lease not renewed", "namespace", c.namespace, "err", err)
			}
		}
	}
}

// releaseLease gives the Lease up (no holder): the run no longer uses
// the namespace it leaves (--keep).
func (c *Cluster) releaseLease() error {
	return c.updateLease(func(s *coordinationv1.LeaseSpec) { s.HolderIdentity = nil })
}

func (c *Cluster) updateLease(change func(*coordinationv1.LeaseSpec)) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
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

// heldLeases returns, by namespace, the renew time of every run's Lease
// that is held at now (listed by RunLabel in every namespace).
func heldLeases(ctx context.Context, cs kubernetes.Interface, now time.Time) (map[string]time.Time, error) {
	list, err := cs.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: RunLabel})
	if err != nil {
		return nil, err
	}
	held := map[string]time.Time{}
	for _, l := range list.Items {
		s := l.Spec
		if l.Name != LeaseName || s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			continue
		}
		if until := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second); now.Before(until) {
			held[l.Namespace] = s.RenewTime.Time
		}
	}
	return held, nil
}
