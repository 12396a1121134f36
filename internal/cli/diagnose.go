package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/spf13/cobra"
)

// Exit codes of pinlab diagnose, besides ExitOK (balanced), ExitError,
// ExitUsage and ExitInterrupted.
const (
	ExitPinned  = int(exit.Pinned)  // the verdict is pinned
	ExitUnknown = int(exit.Unknown) // the verdict is "could not tell"
)

// DiagnoseOptions are the inputs of `pinlab diagnose`.
type DiagnoseOptions struct {
	Service   string
	Namespace string
	// Lab takes the objects from a running `pinlab lab up` at Control
	// (with the token in TokenFile; empty: the default path).
	Lab       bool
	Control   string
	TokenFile string
	// Kubeconfig and Context select a cluster as kubectl does (client-go's
	// loading rules) when Lab is false.
	Kubeconfig, Context string
	// Prometheus, if set, is the URL of a Prometheus server (inside
	// 127.0.0.0/8) whose grpc_server_* series give the per-pod rates.
	Prometheus string
	// Window is the time between the two samples of each pod, and the
	// range of the Prometheus queries.
	Window time.Duration
	// Output is "text" or "json".
	Output string
	// Verbose prints how each pod was reached.
	Verbose  bool
	Out, Err io.Writer
}

// diagnoseLong is diagnose's help.
const diagnoseLong = `Follow the diagnostic path for pinning on one Service: (1) compare per-pod request
rates, sampled twice from each pod's grpc.channelz.v1 service --window apart;
(2) count the connections each client holds and to which pods; (3) look for
an L7 proxy in the path (sidecar containers, mesh annotations, a gateway
Service's endpoints as clients, inbound-sidecar loopback) and tell the
Service's kind. Then a verdict with its cause, the figures, the fixes with
their trade-offs and the lab scenario that reproduces it.

Sources: --lab, a running ` + "`pinlab lab up`" + ` through its control API; else a
cluster as kubectl finds it (--kubeconfig, $KUBECONFIG, ~/.kube/config;
--context), whose API server must be inside 127.0.0.0/8 (a local control
plane, or kubectl proxy). Pods are sampled at their pod IPs, so on a real
cluster (pod IPs outside 127.0.0.0/8) step 1 and 2 are refused: reaching
them through the API server's port-forward is not built yet.

Exit codes: 0 balanced, 4 pinned, 5 could not tell, 1 failed (no such
Service, no lab answering), 2 bad flags, 130 interrupted.

With --prometheus URL the per-pod rates come from Prometheus instead
(increase() of grpc_server_started_total and grpc_server_handled_total over
--window, by the namespace and pod target labels, health and channelz calls
left out; -v shows the queries); the connections still come from channelz.

Bounds: listing the objects 10s, each pod's sample 5s (8 pods at once), each
Prometheus query 10s; the whole run takes about --window plus two samples.`

// NewCmdDiagnose returns `pinlab diagnose`; runF replaces the run in
// tests of the flags (nil: the real one).
func NewCmdDiagnose(stdout, stderr io.Writer, runF func(context.Context, *DiagnoseOptions) error) *cobra.Command {
	o := &DiagnoseOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:     "diagnose SERVICE [--lab | --kubeconfig FILE --context NAME]",
		Short:   "Tell whether a Service's gRPC calls are pinned to a few pods, why, and what fixes it",
		Long:    diagnoseLong,
		Example: "  pinlab diagnose pricing -n shop --lab\n  pinlab diagnose pricing-headless -n shop --lab --window 10s -o json",
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
	f.StringVarP(&o.Namespace, "namespace", "n", "default", "namespace of the Service")
	f.BoolVar(&o.Lab, "lab", false, "diagnose a running lab (pinlab lab up), through its control API")
	f.StringVar(&o.Control, "control", control.DefaultAddr, "control API address of the running lab")
	f.StringVar(&o.TokenFile, "token-file", "", "file with the lab's token (default: the one lab up writes for --control)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file, without --lab (default: $KUBECONFIG, else ~/.kube/config); its API server must be inside 127.0.0.0/8")
	f.StringVar(&o.Context, "context", "", "kubeconfig context (default: the current one)")
	f.StringVar(&o.Prometheus, "prometheus", "", "take the per-pod rates from this Prometheus (e.g. http://127.0.0.1:9090), which scrapes the pods' metrics ports (see pinlab lab targets)")
	f.DurationVar(&o.Window, "window", evidence.DefaultWindow, "time between the two samples of each pod (and the range of the Prometheus queries: at least twice its scrape interval)")
	f.StringVarP(&o.Output, "output", "o", "text", "text or json")
	f.BoolVarP(&o.Verbose, "verbose", "v", false, "say how each pod was reached and show the Prometheus queries")
	return cmd
}

func (o *DiagnoseOptions) check() error {
	switch {
	case o.Lab && (o.Kubeconfig != "" || o.Context != ""):
		return exit.UsageError(errors.New("--lab and --kubeconfig/--context are two sources; give one"))
	case o.Output != "text" && o.Output != "json":
		return exit.UsageError(fmt.Errorf("-o %q: want text or json", o.Output))
	case o.Window < 100*time.Millisecond || o.Window > 10*time.Minute:
		return exit.UsageError(fmt.Errorf("--window %v: want 100ms to 10m", o.Window))
	}
	if o.Prometheus != "" {
		if err := (&evidence.Prometheus{URL: o.Prometheus}).Check(); err != nil {
			return exit.UsageError(fmt.Errorf("--prometheus %q: want the server's base URL, http://IP:PORT inside 127.0.0.0/8 such as http://127.0.0.1:9090 (%w)", o.Prometheus, err))
		}
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
	lc := &control.Client{Addr: o.Control, TokenFile: o.TokenFile}
	var src evidence.Source = labSource{lc}
	if o.Lab {
		info, err := lc.Info(ctx)
		if err != nil {
			return err
		}
		if err := reachable(info, "diagnose", lc); err != nil {
			return err
		}
	} else {
		k := &evidence.Kube{Kubeconfig: o.Kubeconfig, Context: o.Context, Namespace: o.Namespace}
		if _, err := k.Load(); err != nil {
			return err
		}
		src = k
	}
	req := evidence.Request{Namespace: o.Namespace, Service: o.Service, Window: o.Window, Sampling: func(n int, w time.Duration) {
		fmt.Fprintf(o.Err, "reading the channelz of %s twice, %v apart ...\n", plural(n, "pod"), w)
	}}
	if o.Prometheus != "" {
		req.Prometheus = &evidence.Prometheus{URL: o.Prometheus}
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
			fmt.Fprintf(o.Err, "pod %s: channelz at %s", p.Name, p.Addr)
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
