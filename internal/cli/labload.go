package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/labup"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/spf13/cobra"
)

// LoadOptions are the inputs of `pinlab lab load`.
type LoadOptions struct {
	CtlOptions
	// Target is a gRPC target: a Service as "NAME:PORT" (resolved through
	// the lab's DNS as NAME.NAMESPACE.svc.cluster.local), or a full
	// target ("dns://...", "passthrough:///IP:PORT").
	Target string
	// Clients is how many clients run, each with one gRPC channel.
	Clients int
	// Rate is each client's calls per second.
	Rate float64
	// Policy is pick_first or round_robin.
	Policy string
	// From names the lab pods the clients dial from, as app=LABEL
	// selector value of a Deployment ("deployment/order": the pods of
	// Deployment order, one client per pod, round robin); empty dials from
	// 127.0.1.1, 127.0.1.2, ... (addresses of no pod: clients outside the
	// cluster).
	From string
	// Duration stops the load after it; zero runs until Ctrl-C.
	Duration time.Duration
	// AllowFailures is how many failed calls still count as success (exit
	// 0); more fail the command.
	AllowFailures int64
	// XDSServer is the xDS control plane's IP:PORT for an xds:/// target.
	XDSServer string
}

// NewCmdLabLoad returns `pinlab lab load`.
func NewCmdLabLoad(stdout, stderr io.Writer) *cobra.Command {
	o := &LoadOptions{CtlOptions: CtlOptions{Out: stdout, Err: stderr}}
	cmd := &cobra.Command{
		Use:   "load TARGET",
		Short: "Call a running lab's Service with real gRPC clients until Ctrl-C (for pinlab diagnose)",
		Long: `Run --clients gRPC clients (pinlab's load clients: one channel each, an
open-loop schedule of --rate calls/s) against TARGET in the running lab, until
Ctrl-C or --duration, then print the calls each pod answered. If the lab
stops (its control API fails 3 checks a second apart), the clients stop and
lab load exits 1 saying so. TARGET is a
Service as NAME:PORT, resolved through the lab's DNS as
NAME.NAMESPACE.svc.cluster.local, or a gRPC target (dns://..., passthrough:///IP:PORT),
or xds:///SERVICE.NAMESPACE:PORT with --xds-server naming an xDS control plane
in the lab (deploy/xds's, applied with kubectl to a lab up --control-plane
kubernetes: the pinlab-xds Service's ClusterIP, port 18000); the clients then
balance each call with the policy the control plane sends, and --policy is not
used.
With --from deployment/NAME the clients dial from the IPs of that Deployment's
pods (one client per pod), so that diagnose names them.

Exit codes: 0 when every call succeeded (or no more failed than
--allow-failures), 1 when more failed (the counts by gRPC code are printed),
when the lab stopped answering, or on an error; 2 bad flags; 130 when
interrupted before the clients started. Ctrl-C and --duration are the
normal end of the load.`,
		Example: "  pinlab lab load pricing:8471 -n shop --clients 4 --rate 250\n  pinlab lab load pricing-headless:8471 -n shop --policy round_robin --from deployment/order\n  pinlab lab load xds:///pricing.shop:8471 --xds-server 10.96.0.42:18000",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return exit.UsageError(fmt.Errorf("lab load takes one target such as pricing:8471, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Target = args[0]
			if o.AllowFailures < 0 {
				return exit.UsageError(fmt.Errorf("--allow-failures %d: want 0 or more", o.AllowFailures))
			}
			if o.Clients < 1 || o.Clients > 1000 || o.Rate <= 0 || o.Rate > 100000 {
				return exit.UsageError(fmt.Errorf("--clients %d, --rate %g: want 1 to 1000 clients and a rate above 0, at most 100000", o.Clients, o.Rate))
			}
			if err := labup.CheckPolicy(o.Policy); err != nil {
				return exit.UsageError(fmt.Errorf("--policy %q: %w", o.Policy, err))
			}
			if strings.HasPrefix(o.Target, "xds:") && cmd.Flags().Changed("policy") {
				return exit.UsageError(fmt.Errorf("--policy %s: an xds:/// target's policy is the control plane's (the Service's xds.pinlab.dev/lb-policy annotation)", o.Policy))
			}
			return labLoad(cmd.Context(), o)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.IntVar(&o.Clients, "clients", 4, "clients, one gRPC channel each")
	f.Float64Var(&o.Rate, "rate", 100, "calls per second of each client")
	f.StringVar(&o.Policy, "policy", "pick_first", "load balancing policy: pick_first, round_robin, least_request or weighted_round_robin (ring_hash needs settings lab load does not take)")
	f.StringVar(&o.From, "from", "", "deployment/NAME: dial from the IPs of its pods (default 127.0.1.N, no pod's; on a real control plane the top of the pod range, 10.244.254.N)")
	f.DurationVar(&o.Duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	f.Int64Var(&o.AllowFailures, "allow-failures", 0, "how many failed calls still exit 0 (default 0: any failed call exits 1)")
	f.StringVar(&o.XDSServer, "xds-server", "", "the xDS control plane's IP:PORT, for an xds:/// target")
	return cmd
}

func labLoad(ctx context.Context, o *LoadOptions) error {
	if o.Duration < 0 {
		return exit.UsageError(fmt.Errorf("--duration %v: want a positive duration, or 0 to run until Ctrl-C", o.Duration))
	}
	c := o.client()
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	// A target on the host's loopback (kubectl port-forward's) is
	// reachable from anywhere; the clients then dial from 127.0.1.N.
	podCIDR := info.PodCIDR
	if t, ok := loopbackTarget(o.Target); ok && o.From == "" {
		o.Target, podCIDR = t, ""
	} else if err := reachable(info, "lab load", c); err != nil {
		return err
	}
	var deployment string
	if o.From != "" {
		kind, name, ok := strings.Cut(o.From, "/")
		if !ok || kindAliases[strings.ToLower(kind)] != "Deployment" {
			return exit.UsageError(fmt.Errorf("--from %q: want deployment/NAME", o.From))
		}
		deployment = name
	}
	sources, err := labup.Sources(ctx, c, podCIDR, o.Clients, o.Namespace, deployment)
	if err != nil {
		return err
	}
	s, err := labup.Load(ctx, labup.LoadOptions{
		Lab: c, Target: o.Target, Namespace: o.Namespace, Clients: o.Clients, Rate: o.Rate, Policy: o.Policy, Sources: sources, Duration: o.Duration, AllowFailures: o.AllowFailures, XDSServer: o.XDSServer,
		Started: func(target string) {
			policy := o.Policy
			if o.XDSServer != "" {
				policy = "the control plane's policy"
			}
			fmt.Fprintf(o.Out, "%d clients calling %s (%s), %g calls/s each, from %s; stop with Ctrl-C\n", o.Clients, target, policy, o.Rate, sourceList(sources))
		},
	})
	if s != nil {
		printServed(o.Out, s)
	}
	return err
}

// loopbackTarget returns target as a passthrough gRPC target when it is
// an address in 127.0.0.0/8 ("127.0.0.1:8471", or passthrough:/// of one),
// such as kubectl port-forward's.
func loopbackTarget(target string) (string, bool) {
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(target, "passthrough:///"))
	if err != nil || !loopback.Prefix.Contains(ap.Addr()) {
		return "", false
	}
	return "passthrough:///" + ap.String(), true
}

func sourceList(ips []netip.Addr) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	if len(s) > 4 {
		return strings.Join(s[:4], ", ") + fmt.Sprintf(" and %d more", len(s)-4)
	}
	return strings.Join(s, ", ")
}

func printServed(w io.Writer, s *labup.Served) {
	pods := slices.Sorted(maps.Keys(s.ByPod))
	took := s.Took
	fmt.Fprintf(w, "\ncalls answered per pod over %.1fs (%d failed%s):\n", took.Seconds(), s.Failed, failedCodes(s.ByCode))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCALLS\tCALLS/S")
	for _, p := range pods {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\n", p, s.ByPod[p], float64(s.ByPod[p])/took.Seconds())
	}
	tw.Flush()
}

// failedCodes lists failed calls by code (": DeadlineExceeded 3, ...").
func failedCodes(byCode map[string]int64) string {
	if len(byCode) == 0 {
		return ""
	}
	codes := make([]string, 0, len(byCode))
	for c := range byCode {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for i, c := range codes {
		codes[i] = fmt.Sprintf("%s %d", c, byCode[c])
	}
	return ": " + strings.Join(codes, ", ")
}
