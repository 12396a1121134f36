package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
)

// TargetsOptions are the inputs of `pinlab lab targets`.
type TargetsOptions struct {
	CtlOptions
	// Format is "file_sd" (Prometheus file-based service discovery JSON,
	// the default) or "scrape-config" (a prometheus.yml with those targets
	// as static_configs).
	Format string
	// Interval is the scrape-config's scrape_interval, in Prometheus's
	// duration syntax; default "5s".
	Interval string
}

// NewCmdLabTargets returns `pinlab lab targets`.
func NewCmdLabTargets(stdout, stderr io.Writer) *cobra.Command {
	o := &TargetsOptions{CtlOptions: CtlOptions{Out: stdout, Err: stderr}}
	cmd := &cobra.Command{
		Use:   "targets",
		Short: "Print Prometheus scrape targets (file_sd JSON or a prometheus.yml) for the running lab's pod metrics ports",
		Long: `Print the running lab's pods that serve Prometheus metrics (--metrics-port, or
a containerPort named "metrics") as Prometheus file_sd targets, one group per
pod labelled with namespace, pod and the pod's labels; or, with
-o scrape-config, a whole prometheus.yml that scrapes them. Pods come and go:
run it again after a scale (file_sd files are re-read by Prometheus).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.Format {
			case "file_sd", "scrape-config":
			default:
				return exit.UsageError(fmt.Errorf("-o %q: want file_sd or scrape-config", o.Format))
			}
			return labTargets(cmd.Context(), o)
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().StringVarP(&o.Format, "output", "o", "file_sd", "file_sd or scrape-config")
	cmd.Flags().StringVar(&o.Interval, "scrape-interval", "5s", "scrape_interval of -o scrape-config")
	return cmd
}

func labTargets(ctx context.Context, o *TargetsOptions) error {
	objs, err := o.client().Objects(ctx)
	if err != nil {
		return err
	}
	pods := slices.DeleteFunc(objs.Pods, func(p corev1.Pod) bool { return !o.AllNamespaces && p.Namespace != o.Namespace })
	groups := control.MetricsTargets(pods)
	if len(groups) == 0 {
		fmt.Fprintf(o.Err, "no pod serves metrics here (give pods --metrics-port or a containerPort named %q)\n", control.MetricsPortName)
	}
	if len(groups) > 0 {
		info, err := o.client().Info(ctx)
		if err != nil {
			return err
		}
		if info.NetnsPID != 0 {
			// lab up --control-plane kubernetes: pod addresses are local
			// to the lab's private network namespace only.
			fmt.Fprintf(o.Err, "note: these pod addresses exist only inside the lab's network namespace; run Prometheus there, e.g.\n"+
				"  pinlab lab exec%s -- prometheus --config.file=prometheus.yml --web.listen-address=127.0.0.1:9090\n"+
				"and query it from there too (pinlab lab exec ... -- pinlab diagnose --prometheus http://127.0.0.1:9090 ...)\n",
				controlFlags(o.Control, cmp.Or(o.TokenFile, defaultTokenPath(o.Control))))
		}
	}
	if o.Format == "file_sd" {
		if groups == nil {
			groups = []control.TargetGroup{}
		}
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(groups)
	}
	return control.WriteScrapeConfig(o.Out, groups, o.Interval)
}

// defaultTokenPath is control.TokenPath of addr, or "" when it has none.
func defaultTokenPath(addr string) string {
	p, _ := control.TokenPath(addr)
	return p
}
