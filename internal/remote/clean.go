package remote

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Leftover is a namespace a run created.
type Leftover struct {
	Namespace string
	Run       string    // its RunLabel
	Created   time.Time // the namespace's creation
	// InUse: the run is in progress. Its Lease (LeaseName) is held: it
	// was renewed within its duration, or renewed while Leftovers
	// watched; or the namespace is too new to have a Lease yet.
	InUse bool
	// Renewed is the Lease's last renewal by the runner's clock; zero
	// without a held Lease.
	Renewed time.Time
}

// lapsedRecently bounds the clocks' difference Leftovers allows for: a
// Lease that lapsed longer ago than this, by this machine's clock, is
// taken as lapsed without watching it.
const lapsedRecently = 5 * time.Minute

// Leftovers lists the namespaces that carry RunLabel (with value run, or
// any value when run is empty), by name, each with its Lease's state by
// this machine's clock. With observe, Leases that look lapsed (lapsed
// less than lapsedRecently ago) are watched for a renewal interval plus
// 5 s (up to 15 s by default), so that a run in progress is seen as
// such even when this machine's clock runs ahead of the runner's.
func Leftovers(ctx context.Context, cs kubernetes.Interface, run string, observe bool) ([]Leftover, error) {
	sel := RunLabel
	if run != "" {
		sel = labels.Set{RunLabel: run}.String()
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(list.Items) == 0 {
		return nil, err
	}
	leases, rv, err := runLeases(ctx, cs)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []Leftover
	watchFor := map[string]bool{}
	var longest time.Duration
	for _, ns := range list.Items {
		l := Leftover{Namespace: ns.Name, Run: ns.Labels[RunLabel], Created: ns.CreationTimestamp.Time}
		le, ok := leases[ns.Name]
		switch {
		case le.held && now.Before(le.renewed.Add(le.holds)):
			l.InUse, l.Renewed = true, le.renewed
		case le.held && now.Before(le.renewed.Add(le.holds+lapsedRecently)):
			watchFor[ns.Name] = true
			longest = max(longest, le.holds/leaseHolds)
		case !ok && now.Sub(l.Created) < leaseHolds*DefaultLeaseRenew:
			l.InUse = true // its run may not have created the Lease yet
		}
		out = append(out, l)
	}
	if observe && len(watchFor) > 0 {
		renewed, err := renewedWithin(ctx, cs, rv, watchFor, longest+5*time.Second)
		if err != nil {
			return nil, err
		}
		for i := range out {
			if renewed[out[i].Namespace] {
				out[i].InUse, out[i].Renewed = true, leases[out[i].Namespace].renewed
			}
		}
	}
	return out, nil
}

// DeleteNamespaces deletes the namespaces and waits until each is gone,
// at most 3 min; the error names those still there. logger may be nil.
func DeleteNamespaces(cs kubernetes.Interface, names []string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return deleteNamespaces(cs, names, logger)
}
