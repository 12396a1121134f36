package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
)

// Exit codes of pinlab diagnose, besides ExitOK (balanced), ExitError,
// ExitUsage and ExitInterrupted.
const (
	ExitPinned  = int(exit.Pinned)  // the verdict is pinned
	ExitUnknown = int(exit.Unknown) // the verdict is "could not tell"
)

// DiagnoseOptions are the inputs of `pinlab diagnose`.
type DiagnoseOptions struct {
	Service string
	// Namespace is the Service's; empty means kubectl's default (the
	// kubeconfig context's namespace, in-cluster the pod's own, else
	// "default"), and "default" with Lab.
	Namespace string
	// Lab takes the objects from a running `pinlab lab up` at Control
	// (with the token in TokenFile; empty: the default path).
	Lab       bool
	Control   string
	TokenFile string
	// Kubeconfig, Context, Cluster, User, As, AsGroups and AsUID select a
	// cluster and credentials as kubectl's flags of those names do
	// (client-go's loading rules and overrides) when Lab is false.
	Kubeconfig, Context, Cluster, User string
	As                                 string
	AsGroups                           []string
	AsUID                              string
	// Direct dials the pods' IPs instead of going through the API
	// server's port-forward (implied in-cluster).
	Direct bool
	// Prometheus, if set, is the base URL of a Prometheus server whose
	// grpc_server_* series give the per-pod rates.
	Prometheus string
	// PrometheusFamily names the metric family of those series
	// (evidence.FamilyNames; the flag's default is "auto").
	// PrometheusLabels names the scrape target's labels by role,
	// "namespace" and "pod"; a role left out keeps its own name.
	PrometheusFamily string
	PrometheusLabels map[string]string
	// AgentImage is pinlab-agent's image, added as an ephemeral container
	// to the pods that serve no channelz and have no agent yet, with Yes;
	// NoAgent uses no agent at all, not even one already there.
	AgentImage string
	NoAgent    bool
	Yes        bool
	// NoExec reads no pod through exec (`cat /proc/net/tcp`), the
	// fallback for pods that serve no channelz and have no agent.
	NoExec bool
	// execDenied is set by checkAccess when RBAC denies pods/exec.
	execDenied bool
	// Port names or numbers the Service port to diagnose; empty: the
	// only one, else the first that says gRPC, else the first.
	Port string
	// Window is the time from the first reading of each pod to the last, and the
	// range of the Prometheus queries.
	Window time.Duration
	// Output is "text" or "json".
	Output string
	// Verbose prints how each pod was reached.
	Verbose  bool
	Out, Err io.Writer

	via string // how the pods were reached, for Verbose
}

// diagnoseLong is diagnose's help.
const diagnoseLong = `Follow the diagnostic path for pinning on one Service: (1) compare per-pod request
rates, read from each pod's grpc.channelz.v1 service once a second over --window
(at most 11 readings), probes' calls left out;
(2) count the connections each client holds and to which pods; (3) look for
an L7 proxy in the path (sidecar containers, mesh annotations, a gateway
Service's endpoints as clients, inbound-sidecar loopback) and tell the
Service's kind. Then a verdict with its cause, the figures, the fixes with
their trade-offs and the lab scenario that reproduces it.

Sources: --lab, a running ` + "`pinlab lab up`" + ` through its control API; else a
cluster as kubectl finds it (--kubeconfig, $KUBECONFIG, ~/.kube/config;
--context, --cluster, --user, --as, --as-group, --as-uid; -n defaults to
the context's namespace), with its credentials (exec plugins too), proxy
and TLS, or the pod's service account when run in a pod without a
kubeconfig. Each pod's channelz is read through the API server's
port-forward, as kubectl port-forward reaches it (WebSocket, else SPDY;
RBAC must allow create on pods/portforward), or at the pod's IP with
--direct, and in-cluster.

Exit codes: 0 balanced, 4 pinned, 5 could not tell, 1 failed (no such
Service, no lab answering), 2 bad flags, 130 interrupted.

Servers without channelz: diagnose reads every pod through pinlab-agent, an
ephemeral container that lists the pod's TCP connections and their bytes
once a second, when agents run in more pods than channelz answers in. One
already there is reused; --agent-image REF --yes adds one where none runs
(it cannot be removed: it stays until the pod is replaced); --no-agent reads
none. The rates are then bytes/s both ways.

With --prometheus URL the per-pod rates come from Prometheus instead
(increase() over --window of the calls counters of a metric family:
--prometheus-family auto picks the first of grpc-java, go-grpc, otel, istio
and linkerd with series for the pods; by the namespace and pod target labels,
--prometheus-labels to rename them; health and channelz calls left out where
the family names the service; -v shows the queries); the connections still
come from channelz.

Before anything, diagnose checks with the API server that it may do what it
needs (deploy/rbac/diagnose.yaml) and names what is missing.

Bounds: listing the objects 10s, opening each pod's port-forward 10s, each
pod's sample 5s (8 pods at once), each Prometheus query 10s, adding an agent
60s (16 pods at once), each permission check 10s; the whole run takes about
--window plus a round of samples.`

// NewCmdDiagnose returns `pinlab diagnose`; runF replaces the run in
// tests of the flags (nil: the real one).
func NewCmdDiagnose(stdout, stderr io.Writer, runF func(context.Context, *DiagnoseOptions) error) *cobra.Command {
	o := &DiagnoseOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "diagnose SERVICE [--lab | --kubeconfig FILE --context NAME [--direct]]",
		Short: "Tell whether a Service's gRPC calls are pinned to a few pods, why, and what fixes it",
		Long:  diagnoseLong,
		Example: strings.ReplaceAll("  pinlab diagnose pricing -n shop --context prod\n  pinlab diagnose pricing -n shop --lab\n  pinlab diagnose pricing-headless -n shop --lab --window 10s -o json\n"+
			"  pinlab diagnose pricing -n shop --agent-image registry.example.com/tools/pinlab-agent:v1 --yes", "pinlab ", DisplayName+" "),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return exit.UsageError(fmt.Errorf("diagnose takes one Service name, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Service = args[0]
			if err := o.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return runDiagnose(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.Namespace, "namespace", "n", "", `namespace of the Service (default: the kubeconfig context's, in a pod its own, else "default"; with --lab "default")`)
	f.BoolVar(&o.Lab, "lab", false, "diagnose a running lab (pinlab lab up), through its control API")
	f.StringVar(&o.Control, "control", control.DefaultAddr, "control API address of the running lab")
	f.StringVar(&o.TokenFile, "token-file", "", "file with the lab's token (default: the one lab up writes for --control)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file, without --lab (default: $KUBECONFIG, else ~/.kube/config, else in a pod its service account)")
	f.StringVar(&o.Context, "context", "", "the name of the kubeconfig context to use (default: the current one)")
	f.StringVar(&o.Cluster, "cluster", "", "the name of the kubeconfig cluster to use (default: the context's)")
	f.StringVar(&o.User, "user", "", "the name of the kubeconfig user to use (default: the context's)")
	f.StringVar(&o.As, "as", "", "username to impersonate, as kubectl --as")
	f.StringArrayVar(&o.AsGroups, "as-group", nil, "group to impersonate, as kubectl --as-group; repeat for several")
	f.StringVar(&o.AsUID, "as-uid", "", "UID to impersonate, as kubectl --as-uid")
	f.BoolVar(&o.Direct, "direct", false, "dial each pod's IP instead of going through the API server's port-forward (where pod IPs are routed; implied when run in a pod)")
	f.StringVar(&o.Prometheus, "prometheus", "", "take the per-pod rates from this Prometheus's base URL (e.g. http://localhost:9090), which scrapes the pods' metrics ports (see pinlab lab targets)")
	f.StringVar(&o.PrometheusFamily, "prometheus-family", evidence.AutoFamily, "the pods' gRPC metrics in Prometheus: "+strings.Join(evidence.FamilyNames(), "|")+" (auto: the first of these with series of the pods)")
	f.StringToStringVar(&o.PrometheusLabels, "prometheus-labels", nil, "the scrape target's labels that name the pods' namespace and pod, as namespace=LABEL,pod=LABEL (default namespace=namespace,pod=pod)")
	f.DurationVar(&o.Window, "window", evidence.DefaultWindow, "time from the first reading of each pod to the last, one a second (and the range of the Prometheus queries: at least twice its scrape interval)")
	f.StringVar(&o.AgentImage, "agent-image", "", "pinlab-agent image to add, as an ephemeral container, to the pods that serve no channelz and have no agent (needs --yes; see docs/diagnose.md)")
	f.BoolVar(&o.NoAgent, "no-agent", false, "read no pinlab-agent, not even one already in the pods")
	f.BoolVar(&o.NoExec, "no-exec", false, "never run cat /proc/net/tcp in the server containers through exec (the fallback for pods without channelz or agent: open connections only, no traffic)")
	f.BoolVar(&o.Yes, "yes", false, "agree to add the pinlab-agent ephemeral container where it is missing (it cannot be removed; it goes with the pod)")
	f.StringVar(&o.Port, "port", "", "the Service port to diagnose, by name or number (default: the only one, else the first whose appProtocol or name says grpc, else the first)")
	f.StringVarP(&o.Output, "output", "o", "text", "text or json")
	f.BoolVarP(&o.Verbose, "verbose", "v", false, "say how each pod was reached and show the Prometheus queries")
	return cmd
}

func (o *DiagnoseOptions) check() error {
	switch {
	case o.Lab && (o.Kubeconfig != "" || o.Context != "" || o.Cluster != "" || o.User != "" || o.As != "" || len(o.AsGroups) > 0 || o.AsUID != ""):
		return exit.UsageError(errors.New("--lab and --kubeconfig/--context/--cluster/--user/--as* are two sources; give one"))
	case o.Lab && o.Direct:
		return exit.UsageError(errors.New("--direct is for a kubeconfig's cluster; --lab always reaches its pods directly"))
	case o.Lab && o.NoExec:
		return exit.UsageError(errors.New("--no-exec is for a kubeconfig's cluster; --lab reads the lab through its control API, channelz only"))
	case o.Lab && (o.AgentImage != "" || o.Yes):
		return exit.UsageError(errors.New("--agent-image and --yes need an API server (a kubeconfig) to add the agent through; --lab reads the lab through its control API, channelz only (for the agent, diagnose a lab started with --control-plane kubernetes through its kubeconfig)"))
	case o.NoAgent && (o.AgentImage != "" || o.Yes):
		return exit.UsageError(errors.New("--no-agent and --agent-image/--yes contradict each other; give one"))
	case o.Yes && o.AgentImage == "":
		return exit.UsageError(errors.New("--yes agrees to add the agent of --agent-image; give --agent-image REF too"))
	case o.Output != "text" && o.Output != "json":
		return exit.UsageError(fmt.Errorf("-o %q: want text or json", o.Output))
	case o.Window < 100*time.Millisecond || o.Window > 10*time.Minute:
		return exit.UsageError(fmt.Errorf("--window %v: want 100ms to 10m", o.Window))
	}
	if o.AgentImage != "" {
		if _, err := name.ParseReference(o.AgentImage); err != nil {
			return exit.UsageError(fmt.Errorf("--agent-image %q: want an image reference such as registry.example.com/tools/pinlab-agent:v1 (%w)", o.AgentImage, err))
		}
	}
	if o.Prometheus != "" {
		if err := (&evidence.Prometheus{URL: o.Prometheus}).Check(); err != nil {
			return exit.UsageError(fmt.Errorf("--prometheus: want the server's base URL, such as http://localhost:9090 (%w)", err))
		}
	}
	if err := evidence.CheckFamily(o.PrometheusFamily); err != nil {
		return exit.UsageError(fmt.Errorf("--prometheus-family: %w", err))
	}
	if err := evidence.CheckTargetLabels(o.PrometheusLabels); err != nil {
		return exit.UsageError(fmt.Errorf("--prometheus-labels: %w", err))
	}
	return nil
}

// labSource lists a running lab's objects through its control API.
type labSource struct{ c *control.Client }

func (s labSource) Objects(ctx context.Context) (evidence.Objects, error) {
	o, err := s.c.Objects(ctx)
	if err != nil {
		return evidence.Objects{}, err
	}
	return evidence.Objects{Services: o.Services, Pods: o.Pods, EndpointSlices: o.EndpointSlices, Deployments: o.Deployments, StatefulSets: o.StatefulSets}, nil
}

func (s labSource) String() string { return "lab at " + s.c.Addr }

func runDiagnose(ctx context.Context, o *DiagnoseOptions) error {
	req := evidence.Request{Namespace: o.Namespace, Service: o.Service, Port: o.Port, Window: o.Window, Sampling: func(n int, w time.Duration, from string) {
		what := map[string]string{"agent": "the pinlab-agent of", "exec": "/proc/net/tcp, through exec, in"}[from]
		fmt.Fprintf(o.Err, "reading %s %s over %v ...\n", cmp.Or(what, "the channelz of"), plural(n, "pod"), w)
	}}
	src, done, err := o.source(ctx, &req)
	if err != nil {
		return err
	}
	defer done()
	if o.Prometheus != "" {
		req.Prometheus = &evidence.Prometheus{URL: o.Prometheus, Family: o.PrometheusFamily,
			NamespaceLabel: o.PrometheusLabels["namespace"], PodLabel: o.PrometheusLabels["pod"]}
	}
	ev, err := evidence.Collect(ctx, src, req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("diagnose: interrupted; nothing to report (%w)", err)
		}
		return err
	}
	if o.Verbose {
		for _, q := range ev.Queries {
			fmt.Fprintf(o.Err, "prometheus query: %s\n", q)
		}
		for _, p := range ev.Pods {
			fmt.Fprintf(o.Err, "pod %s: %s at %s%s", p.Name, ev.RatesFrom, p.Addr, o.via)
			if p.Err != "" {
				fmt.Fprintf(o.Err, ": %s", p.Err)
			}
			fmt.Fprintln(o.Err)
		}
	}
	r := diagnose.Diagnose(ev)
	if o.Output == "json" {
		err = report.DiagnoseJSON(o.Out, &r)
	} else {
		err = report.DiagnoseText(o.Out, &r)
	}
	if err != nil {
		return err
	}
	return verdictExit(r.Verdict)
}

// source returns where the objects come from and sets req's samplers:
// the lab's control API (its pods dialled directly), or the kubeconfig's
// cluster, its permissions checked first, with channelz through
// port-forward (or directly) and, unless NoAgent, pinlab-agent, and,
// unless NoExec, exec. done closes them.
func (o *DiagnoseOptions) source(ctx context.Context, req *evidence.Request) (src evidence.Source, done func(), err error) {
	if o.Lab {
		lc := &control.Client{Addr: o.Control, TokenFile: o.TokenFile}
		info, err := lc.Info(ctx)
		if err != nil {
			return nil, nil, err
		}
		if err := reachable(info, "diagnose", lc); err != nil {
			return nil, nil, err
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		req.Namespace = o.Namespace
		return labSource{lc}, func() {}, nil
	}
	k, cz, err := o.kube()
	if err != nil {
		return nil, nil, err
	}
	req.Namespace, req.Sampler = o.Namespace, cz
	if err := o.checkAccess(ctx, k); err != nil {
		cz.Close()
		return nil, nil, err
	}
	switch {
	case o.NoExec:
		req.ExecOff = "--no-exec"
	case o.execDenied:
		req.ExecOff = "RBAC denies create pods/exec"
	default:
		req.Exec = &evidence.Exec{Config: k.Config(), Pod: k.PodByIP}
	}
	if o.NoAgent {
		return k, func() { cz.Close() }, nil
	}
	ag := &evidence.Agents{Config: k.Config(), Pod: k.PodByIP, Image: o.AgentImage, Confirm: o.confirmAgent}
	req.Agents = ag
	return k, func() { ag.Close(); cz.Close() }, nil
}

// checkAccess asks the API server, before anything is read or changed,
// whether the user has what diagnose needs in the namespace
// (evidence.DiagnosePermissions: adding the agent with --agent-image,
// reading one already there optional, neither with --no-agent; no
// port-forward when pods are dialled directly). A missing required
// permission is an error naming each; a missing optional one a warning.
// When the check itself cannot be made, diagnose says so and goes on.
func (o *DiagnoseOptions) checkAccess(ctx context.Context, k *evidence.Kube) error {
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		return err
	}
	var perms []evidence.Permission
	for _, p := range evidence.DiagnosePermissions(!o.NoAgent, !o.NoExec) {
		switch {
		case p.Subresource == "portforward" && (o.Direct || k.InCluster()):
			continue
		case o.AgentImage != "":
		case p.Subresource == "ephemeralcontainers":
			continue // nothing is added without --agent-image
		case p.Verb == "get" && p.Resource == "pods" && !o.NoAgent:
			p.Optional, p.For = true, p.For+" (one already there)"
		}
		perms = append(perms, p)
	}
	denied, err := evidence.CheckAccess(ctx, cs, o.Namespace, perms)
	switch {
	case err != nil && ctx.Err() != nil:
		return err
	case apierrors.IsForbidden(err):
		fmt.Fprintf(o.Err, "diagnose: could not check permissions first, going on: %v\n", err)
		return nil
	case err != nil:
		return nil // the API server does not answer: listing the objects says so
	}
	var missing []string
	for _, p := range denied {
		if p.Subresource == "exec" {
			o.execDenied = true // not tried: every pod's exec would be refused
		}
		if p.Optional {
			fmt.Fprintf(o.Err, "diagnose: without %s in namespace %s (optional: to %s), diagnose goes on with less\n", p, o.Namespace, p.For)
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (to %s)", p, p.For))
	}
	if len(missing) > 0 {
		return fmt.Errorf("diagnose: the API server denies, in namespace %s, what diagnose needs: %s; nothing was read or changed. deploy/rbac/diagnose.yaml grants it (check one with kubectl auth can-i VERB RESOURCE [--subresource=NAME] -n %s)", o.Namespace, strings.Join(missing, "; "), o.Namespace)
	}
	return nil
}

// confirmAgent says what adding the agent does, to which pods, and
// returns Yes.
func (o *DiagnoseOptions) confirmAgent(namespace string, pods []string, image string) bool {
	what := fmt.Sprintf("some pods of %s serve no channelz, so diagnose reads every pod through pinlab-agent (one unit for all); %s in namespace %s (%s) have no pinlab-agent that runs", o.Service, plural(len(pods), "pod"), namespace, podList(pods))
	if !o.Yes {
		what = fmt.Sprintf("some pods of %s serve no channelz, and %s in namespace %s (%s) have no pinlab-agent that runs", o.Service, plural(len(pods), "pod"), namespace, podList(pods))
		fmt.Fprintf(o.Err, "%s. To read them through it, diagnose would add an ephemeral container %q (image %s, non-root, no capabilities, read-only root) to each, which reads the pod's TCP sockets once a second and prints them to its log. Ephemeral containers cannot be removed: it stays until the pod is replaced. Run again with --yes to add it.\n",
			what, evidence.AgentContainer, image)
		return false
	}
	fmt.Fprintf(o.Err, "%s: adding a pinlab-agent ephemeral container (image %s) to each; it stays until the pod is replaced\n", what, image)
	return true
}

// podList names up to 5 pods.
func podList(pods []string) string {
	if len(pods) > 5 {
		return strings.Join(pods[:5], ", ") + fmt.Sprintf(" and %d more", len(pods)-5)
	}
	return strings.Join(pods, ", ")
}

// kube loads the kubeconfig (setting Namespace to kubectl's default when
// empty) and returns its source and the sampler that reaches its pods:
// through the API server's port-forward, or directly with Direct or
// in-cluster.
func (o *DiagnoseOptions) kube() (*evidence.Kube, *evidence.Channelz, error) {
	k := &evidence.Kube{Kubeconfig: o.Kubeconfig, Context: o.Context, Cluster: o.Cluster, User: o.User,
		As: o.As, AsGroups: o.AsGroups, AsUID: o.AsUID, Namespace: o.Namespace}
	if _, err := k.Load(); err != nil {
		return nil, nil, err
	}
	o.Namespace = k.Namespace
	if o.Direct || k.InCluster() {
		o.via = " (dialled directly)"
		return k, &evidence.Channelz{Dialer: evidence.Direct{}}, nil
	}
	o.via = " (through the API server's port-forward)"
	return k, &evidence.Channelz{Dialer: &evidence.PortForward{Config: k.Config(), Pod: k.PodByIP}}, nil
}

// verdictExit maps a verdict to its exit code (nil for balanced).
func verdictExit(v diagnose.Verdict) error {
	switch v {
	case diagnose.Pinned:
		return exit.Pinned
	case diagnose.Unknown:
		return exit.Unknown
	}
	return nil
}
