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
	// Renewed is when the run last renewed the namespace's Lease
	// (LeaseName), if that Lease is still held: the run is in progress.
	// Zero when the run ended (--keep) or stopped renewing (killed).
	Renewed time.Time
}

// InUse says whether the run still holds the namespace's Lease.
func (l Leftover) InUse() bool { return !l.Renewed.IsZero() }

// Leftovers lists the namespaces that carry RunLabel (with value run, or
// any value when run is empty), by name, each with its Lease's state.
func Leftovers(ctx context.Context, cs kubernetes.Interface, run string) ([]Leftover, error) {
	sel := RunLabel
	if run != "" {
		sel = labels.Set{RunLabel: run}.String()
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(list.Items) == 0 {
		return nil, err
	}
	held, err := heldLeases(ctx, cs, time.Now())
	if err != nil {
		return nil, err
	}
	var out []Leftover
	for _, ns := range list.Items {
		out = append(out, Leftover{Namespace: ns.Name, Run: ns.Labels[RunLabel], Created: ns.CreationTimestamp.Time, Renewed: held[ns.Name]})
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
