// Package clusterrun is the engine behind `pinlab cluster run` and
// `pinlab cluster clean`: it reads a scenario, refuses what a real
// cluster cannot reproduce (scenario.CheckCluster) before anything is
// created, checks the user's permissions, says what it will create and
// waits for consent, runs each variant in a namespace of the user's
// cluster (package remote, a runner.Backend), judges the run as `lab
// run` does (package verdict) and returns the report. What it creates is
// deleted when the run ends, fails or is interrupted; Clean deletes what
// a killed run left, by label.
package clusterrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/remote"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/verdict"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configure Run.
type Options struct {
	// Scenario is a scenario file's path, a built-in's name, or "-" for In.
	Scenario string
	In       io.Reader
	// Kube names the cluster: kubeconfig, context, user, as kubectl.
	Kube *evidence.Kube
	// Image is the pinlab image the pods run (`pinlab image build
	// --push` prints it, by digest). Required.
	Image string
	// Variants, if not empty, are the variants to run, in this order.
	Variants []string
	// Confirm is asked, with what the run will create, before the first
	// write; false stops the run with nothing created. It must return
	// once ctx ends. nil: consent is refused (the CLI passes one that
	// reads --yes or asks).
	Confirm func(ctx context.Context, summary string) (bool, error)
	// Keep leaves the namespaces when the run ends (Clean removes them).
	Keep bool
	// Seed makes random picks repeatable; 0 picks one.
	Seed uint64
	// Logger receives what the backend does; nil discards it.
	Logger *slog.Logger
	// Progress, if not nil, is called about twice a second.
	Progress func([]outcome.Progress)
	// Notes, if not nil, is told the run's ID and namespaces.
	Notes io.Writer
}

// ErrNoConsent is Run's and Clean's error when Confirm said no.
var ErrNoConsent = errors.New("nothing created: not confirmed (give --yes, or answer y)")

// setupTimeout bounds each variant's setup on the cluster: its pods
// scheduled, the image pulled (remote.DefaultPullTimeout names a pod that
// cannot pull it), its clients started.
const setupTimeout = 3 * time.Minute

// loadMargin is what a client pod's --duration adds to the plan's
// duration: the variant's setup and room.
const loadMargin = setupTimeout + time.Minute

// Run runs the scenario opts names on the cluster and judges it. It
// returns the result of every variant that started, with the run's error
// (a failed variant, an interruption); nil when nothing ran.
func Run(ctx context.Context, opts Options) (*report.Result, error) {
	if opts.Image == "" {
		return nil, exit.UsageError(errors.New("--image: required: the pinlab image the pods run (`pinlab image build --push REF` prints it)"))
	}
	ref, err := name.ParseReference(opts.Image, name.StrictValidation)
	if err != nil {
		return nil, exit.UsageError(fmt.Errorf("--image %q: not an image reference (REPOSITORY@sha256:..., as `pinlab image build --push` prints it): %w", opts.Image, err))
	}
	if _, ok := ref.(name.Digest); !ok {
		note(opts.Notes, "--image %s names a tag: pods started at different times may run different builds; pin it by the digest `pinlab image build --push` prints", opts.Image)
	}
	p, err := prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	k := opts.Kube
	if k == nil {
		k = &evidence.Kube{}
	}
	host, err := k.Load()
	if err != nil {
		return nil, exit.UsageError(err)
	}
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		return nil, err
	}
	if err := reachable(ctx, cs, host); err != nil {
		return nil, err
	}
	run := remote.NewRunID()
	if err := checkAccess(ctx, cs, host, remote.Namespace(run, 0), "cluster run", Permissions); err != nil {
		return nil, err
	}
	p = inNamespaces(p, run)
	ok, err := confirm(ctx, opts.Confirm, summary(p, host, run, opts))
	if err = cmp.Or(ctx.Err(), err); err != nil || !ok {
		return nil, cmp.Or(err, exit.UsageError(ErrNoConsent))
	}
	b, err := remote.New(remote.Config{REST: rest.CopyConfig(k.Config()), Clientset: cs, Run: run, Image: opts.Image,
		Token: remote.NewToken(), Keep: opts.Keep, LoadDuration: p.Duration + loadMargin, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	note(opts.Notes, "run %s on %s: namespaces %s-*; if this command is killed, `pinlab cluster clean --run %s` removes them", run, host, "pinlab-"+run, run)
	out, err := runner.Run(ctx, p, runner.Options{Seed: opts.Seed, Logger: opts.Logger, Progress: opts.Progress, Backend: b,
		OffMachine: true, SetupTimeout: setupTimeout})
	err = errors.Join(err, leftBehind(cs, run, opts))
	if out == nil {
		return nil, err
	}
	res := report.New(p, out, verdict.JudgeRun(p, out))
	res.Cluster = host
	return res, err
}

// prepare reads the scenario, refuses what a cluster cannot do, and picks
// the variants, before any call to the cluster.
func prepare(ctx context.Context, opts Options) (*plan.Plan, error) {
	p, err := scenario.OpenForCluster(ctx, opts.Scenario, opts.In, opts.Variants)
	if errors.Is(err, scenario.ErrNotFound) || errors.Is(err, scenario.ErrNoScenario) {
		return nil, exit.UsageError(err)
	}
	if err != nil {
		return nil, err
	}
	if p, err = p.Select(opts.Variants); err != nil {
		return nil, exit.UsageError(fmt.Errorf("--variant: %w", err))
	}
	var errs []error
	for _, v := range p.Variants {
		errs = append(errs, fits(v)...)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: cluster run cannot run this yet (lab run can):\n%w", opts.Scenario, errors.Join(errs...))
	}
	return p, nil
}

// fits refuses a variant that this backend cannot run yet: objects in
// more than one namespace (a run gives each variant one), and clients
// with the kubernetes resolver (their pods would need RBAC to watch
// EndpointSlices, which the run does not grant).
func fits(v plan.Variant) []error {
	var errs []error
	var namespaces []string
	for _, o := range v.Objects {
		m, err := meta.Accessor(o)
		if err != nil {
			return []error{err}
		}
		ns := m.GetNamespace()
		if ns == "" {
			ns = m.GetName() // a Namespace object (others are defaulted by the scenario)
		}
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	if len(namespaces) > 1 {
		errs = append(errs, fmt.Errorf("variant %s: objects in namespaces %s: cluster run gives each variant one namespace", v.Name, strings.Join(namespaces, ", ")))
	}
	for _, st := range v.Steps {
		if err := stepFits(v, st); err != nil {
			errs = append(errs, fmt.Errorf("variant %s: step at %v: %w", v.Name, st.At, err))
		}
	}
	for _, g := range v.Groups {
		for _, o := range v.Objects {
			if s, ok := o.(*appsv1.StatefulSet); ok && s.Name == g.Name {
				errs = append(errs, fmt.Errorf("variant %s: client group %s: its clients run as a StatefulSet named after it, and the scenario has StatefulSet %s; rename the group", v.Name, g.Name, s.Name))
			}
		}
	}
	for _, g := range v.Groups {
		if g.Target.XDS {
			errs = append(errs, fmt.Errorf("variant %s: client group %s: an xds:/// target: not on a cluster yet (it needs an xDS control plane there; pinlab xds serve is one)", v.Name, g.Name))
		}
		if g.Settings.Resolver == load.ResolverKubernetes {
			errs = append(errs, fmt.Errorf("variant %s: client group %s: resolver kubernetes: not on a cluster yet (its pods would need a Role to watch EndpointSlices)", v.Name, g.Name))
		}
	}
	return errs
}

// stepFits refuses a step that a cluster would not carry out as the lab
// does.
func stepFits(v plan.Variant, st plan.Step) error {
	switch a := st.Action.(type) {
	case plan.Update:
		if a.Image != "" {
			return fmt.Errorf("it changes %s's image to %q: on a cluster every pinlab pod runs the one image --image names; run it on the lab", a.Workload, a.Image)
		}
	case plan.ConfigureClients:
		for _, g := range v.Groups {
			n := 0
			for _, c := range a.Clients {
				if c.Group == g.Name {
					n++
				}
			}
			if n > 0 && n < g.Clients {
				return fmt.Errorf("it changes %d of client group %s's %d clients: on a cluster a group is one StatefulSet, changed whole", n, g.Name, g.Clients)
			}
		}
	case plan.PodAction:
		if (a.Verb == plan.PodNotReady || a.Verb == plan.PodReady) && a.Pod.Workload.Kind != "" && !grpcReadiness(v, a.Pod.Workload) {
			return fmt.Errorf("%s: %s has no gRPC readiness probe of the whole server, the one a cluster's pod can be made to fail (through its admin endpoint)", a.Verb, a.Pod.Workload)
		}
	}
	return nil
}

// grpcReadiness reports whether workload w's pods have a gRPC readiness
// probe without a service name, which the run points at the pod's
// readiness service.
func grpcReadiness(v plan.Variant, w plan.Workload) bool {
	for _, o := range v.Objects {
		var t *corev1.PodTemplateSpec
		switch x := o.(type) {
		case *appsv1.Deployment:
			if w.Kind == "Deployment" && x.Name == w.Name {
				t = &x.Spec.Template
			}
		case *appsv1.StatefulSet:
			if w.Kind == "StatefulSet" && x.Name == w.Name {
				t = &x.Spec.Template
			}
		}
		if t != nil && len(t.Spec.Containers) == 1 {
			p := t.Spec.Containers[0].ReadinessProbe
			return p != nil && p.GRPC != nil && (p.GRPC.Service == nil || *p.GRPC.Service == "")
		}
	}
	return false
}

// inNamespaces returns p with variant i in remote.Namespace(run, i).
func inNamespaces(p *plan.Plan, run string) *plan.Plan {
	q := *p
	q.Variants = make([]plan.Variant, len(p.Variants))
	for i, v := range p.Variants {
		ns := remote.Namespace(run, i)
		q.Variants[i] = v.InNamespaces(func(string) string { return ns })
	}
	return &q
}

// reachableTimeout bounds the first call: a context whose API server
// does not answer fails within it.
const reachableTimeout = 10 * time.Second

func reachable(ctx context.Context, cs kubernetes.Interface, host string) error {
	ctx, cancel := context.WithTimeout(ctx, reachableTimeout)
	defer cancel()
	err := cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error()
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("the API server at %s did not answer within %v: %w", host, reachableTimeout, err)
	}
	return fmt.Errorf("the API server at %s: %w", host, err)
}

func confirm(ctx context.Context, f func(context.Context, string) (bool, error), summary string) (bool, error) {
	if f == nil {
		return false, nil
	}
	return f(ctx, summary)
}

// leftTimeout bounds the check of what a run left.
const leftTimeout = 10 * time.Second

// leftBehind says which of the run's namespaces are still there after it
// (none unless the cleanup failed: an API server that stopped answering,
// a namespace stuck terminating), or, with Keep, which it left on
// purpose (a note); nil when none.
func leftBehind(cs kubernetes.Interface, run string, opts Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), leftTimeout)
	defer cancel()
	ls, err := remote.Leftovers(ctx, cs, run, false)
	var left []string
	for _, l := range ls {
		left = append(left, l.Namespace)
	}
	switch {
	case err != nil:
		return fmt.Errorf("could not check what the run left (%w): `pinlab cluster clean --run %s` deletes it", err, run)
	case len(left) > 0 && opts.Keep:
		note(opts.Notes, "--keep: left namespace %s; `pinlab cluster clean --run %s` deletes them", strings.Join(left, ", "), run)
	case len(left) > 0:
		return fmt.Errorf("namespace %s still there after the run: `pinlab cluster clean --run %s` deletes them", strings.Join(left, ", "), run)
	}
	return nil
}

// note writes one line on w, if not nil.
func note(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
