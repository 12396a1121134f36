package clusterrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/remote"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// CleanOptions configure Clean.
type CleanOptions struct {
	Kube *evidence.Kube
	// Run, if not empty, is the one run whose namespaces to delete, even
	// if it is in progress; empty: every run's that is not.
	Run string
	// Confirm is asked with the namespaces before they are deleted; nil
	// refuses.
	Confirm func(ctx context.Context, summary string) (bool, error)
	// Out is told what was deleted.
	Out io.Writer
}

// Clean deletes the namespaces runs left (a killed run, --keep), found by
// remote.RunLabel, and waits until they are gone. Without Run, it leaves
// (and names) the namespaces of runs in progress: their Lease is held
// (remote.LeaseName). A killed run's lease lapses within 30 s of its
// last renewal; a lease that looks lapsed is watched for up to 15 s for
// a renewal first, in case this machine's clock is ahead.
func Clean(ctx context.Context, opts CleanOptions) error {
	if opts.Run != "" {
		if errs := validation.IsValidLabelValue(opts.Run); len(errs) > 0 {
			return exit.UsageError(fmt.Errorf("--run %q: not a run ID (cluster run printed it: 8 hex digits): %s", opts.Run, strings.Join(errs, "; ")))
		}
	}
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
	if err := checkAccess(ctx, cs, host, "", "cluster clean", cleanPermissions()); err != nil {
		return err
	}
	return clean(ctx, cs, host, opts)
}

// clean is Clean on an API server that answered.
func clean(ctx context.Context, cs kubernetes.Interface, host string, opts CleanOptions) error {
	// Without a run named, watch the leases that look lapsed for a
	// renewal: this machine's clock may be ahead of the runner's.
	left, err := remote.Leftovers(ctx, cs, opts.Run, opts.Run == "")
	if err != nil {
		return fmt.Errorf("the API server at %s: %w", host, err)
	}
	var names, lines []string
	for _, l := range left {
		age := time.Since(l.Created).Round(time.Second)
		if l.InUse && opts.Run == "" {
			note(opts.Out, "left namespace %s: run %s is in progress (it holds the namespace's lease); `pinlab cluster clean --run %s` deletes it anyway",
				l.Namespace, l.Run, l.Run)
			continue
		}
		line := fmt.Sprintf("  namespace %s (run %s, created %v ago)", l.Namespace, l.Run, age)
		if l.InUse {
			line = fmt.Sprintf("  namespace %s (run %s, created %v ago, IN PROGRESS: it holds the namespace's lease)", l.Namespace, l.Run, age)
		}
		names, lines = append(names, l.Namespace), append(lines, line)
	}
	if len(names) == 0 {
		note(opts.Out, "nothing to clean on %s", host)
		return nil
	}
	s := fmt.Sprintf("cluster clean deletes on the API server %s:\n%s", host, strings.Join(lines, "\n"))
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
