package labup

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/scenario"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// open reads and checks the manifests (a file, a built-in, or standard
// input for "-"), including what the API server would reject, before
// anything starts. Reading ends when ctx does.
func open(ctx context.Context, opts Options) (*scenario.File, error) {
	f, err := scenario.OpenObjectsInput(ctx, opts.Manifests, opts.In)
	if errors.Is(err, scenario.ErrNotFound) {
		return nil, exit.UsageError(err) // as lab run: exit 2
	}
	if err != nil {
		return nil, err
	}
	if len(f.Objects) == 0 {
		return nil, fmt.Errorf("%s: %w", f.Name, errNoObjects)
	}
	for _, o := range f.Objects {
		if err := cluster.Validate(o.Obj); err != nil {
			return nil, apiError(o, err, "the API server would reject it")
		}
	}
	if err := checkLabSize(f); err != nil {
		return nil, err
	}
	return f, nil
}

// podsOf returns the pods a workload object asks for (1 for a Pod, 0 for
// objects that run none).
func podsOf(o scenario.Object) int {
	switch obj := o.Obj.(type) {
	case *appsv1.Deployment:
		return int(ptr.Deref(obj.Spec.Replicas, 1))
	case *appsv1.StatefulSet:
		return int(ptr.Deref(obj.Spec.Replicas, 1))
	case *appsv1.ReplicaSet:
		return int(ptr.Deref(obj.Spec.Replicas, 1))
	case *corev1.Pod:
		return 1
	}
	return 0
}

// checkLabSize refuses manifests whose workloads ask for more pods than a
// lab runs (plan.MaxPods, as lab run), or more file descriptors than the
// process may open, naming the figures, before anything starts.
func checkLabSize(f *scenario.File) error {
	pods, biggest := 0, 0
	for i, o := range f.Objects {
		n := podsOf(o)
		pods += n
		if n > podsOf(f.Objects[biggest]) {
			biggest = i
		}
	}
	if pods > plan.MaxPods {
		o := f.Objects[biggest]
		return o.Doc.Errorf("spec.replicas", "the workloads ask for %d pods in all, more than the %d a lab runs; this one has %d: lower the replicas", pods, plan.MaxPods, podsOf(o))
	}
	need := plan.FDsPerLab + control.DefaultMaxConns + plan.FDsPerPod*pods
	if limit, ok := runner.EnsureFiles(uint64(need)); !ok {
		return fmt.Errorf("%s: %d pods would hold about %d file descriptors before any client connects, more than 90%% of the %d this process may open (ulimit -n); raise the hard limit (ulimit -Hn, as root) or lower the replicas", f.Name, pods, need, limit)
	}
	return nil
}

// namespaces lists the namespaces of f's objects (Namespaces aside), in
// their order, "default" for objects that name none.
func namespaces(f *scenario.File) []string {
	var nss []string
	for _, o := range f.Objects {
		if _, isNS := o.Obj.(*corev1.Namespace); isNS {
			continue
		}
		ns := o.Doc.Namespace
		if ns == "" {
			ns = "default"
		}
		if !slices.Contains(nss, ns) {
			nss = append(nss, ns)
		}
	}
	return nss
}
