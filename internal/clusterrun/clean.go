package clusterrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/remote"
	"k8s.io/client-go/kubernetes"
)

// CleanOptions configure Clean.
type CleanOptions struct {
	Kube *evidence.Kube
	// Run, if not empty, is the one run whose namespaces to delete;
	// empty: every run's.
	Run string
	// Confirm is asked with the namespaces before they are deleted; nil
	// refuses.
	Confirm func(ctx context.Context, summary string) (bool, error)
	// Out is told what was deleted.
	Out io.Writer
}

// Clean deletes the namespaces runs left (a killed run, --keep), found by
// remote.RunLabel, and waits until they are gone.
func Clean(ctx context.Context, opts CleanOptions) error {
	k := opts.Kube
	if k == nil {
		k = &evidence.Kube{}
	}
	host, err := k.Load()
	if err != nil {
		return exit.UsageError(err)
	}
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		return err
	}
	if err := reachable(ctx, cs, host); err != nil {
		return err
	}
	names, err := remote.Leftovers(ctx, cs, opts.Run)
	if err != nil {
		return fmt.Errorf("the API server at %s: %w", host, err)
	}
	if len(names) == 0 {
		note(opts.Out, "nothing to clean on %s", host)
		return nil
	}
	s := fmt.Sprintf("cluster clean deletes on the API server %s: namespace %s", host, strings.Join(names, ", namespace "))
	ok, err := confirm(ctx, opts.Confirm, s)
	if err = cmp.Or(ctx.Err(), err); err != nil {
		return err
	}
	if !ok {
		return exit.UsageError(errors.New("nothing deleted: not confirmed (give --yes, or answer y)"))
	}
	if err := remote.DeleteNamespaces(cs, names, nil); err != nil {
		return err
	}
	note(opts.Out, "deleted namespace %s", strings.Join(names, ", namespace "))
	return nil
}
