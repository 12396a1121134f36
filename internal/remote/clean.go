package remote

import (
	"context"
	"log/slog"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Leftovers lists the namespaces that carry RunLabel (with value run, or
// any value when run is empty), by name.
func Leftovers(ctx context.Context, cs kubernetes.Interface, run string) ([]string, error) {
	sel := RunLabel
	if run != "" {
		sel = labels.Set{RunLabel: run}.String()
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range list.Items {
		out = append(out, ns.Name)
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
