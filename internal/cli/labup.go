package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/scenarios"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// LabUpOptions are the inputs of `pinlab lab up`.
type LabUpOptions struct {
	// File is a manifest file or built-in name.
	File string
	// Control is the control API address.
	Control string
	// DNSTTL sets the cluster DNS TTL; 0 keeps the default (5s).
	DNSTTL time.Duration
	// FixedOrder keeps DNS answer order stable.
	FixedOrder bool
	// Pods is the DNS pods mode: disabled, insecure or verified.
	Pods     string
	LogLevel string

	Out, Err io.Writer
}

// NewCmdLabUp returns `pinlab lab up`.
func NewCmdLabUp(stdout, stderr io.Writer, runF func(context.Context, *LabUpOptions) error) *cobra.Command {
	opts := &LabUpOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "up [-f FILE|NAME]",
		Short: "Run a mini-cluster from manifests until interrupted, to dig and dial by hand",
		Long: fmt.Sprintf(`Start one mini-cluster from Kubernetes manifests (Namespace, Service,
Deployment, StatefulSet, EndpointSlice; a Scenario document is ignored) and
keep it running until Ctrl-C. It prints the cluster DNS address and the
Services with their VIPs, so you can query it with dig and point your own
clients at it; pinlab lab get/scale/delete/unready/ready change it from
another terminal through its control API. Built-ins: %s.`, strings.Join(scenarios.Manifests(), ", ")),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, ok := logLevels[opts.LogLevel]; !ok && opts.LogLevel != "off" {
				return usageError{fmt.Errorf("--log-level %q: expected off, info or debug", opts.LogLevel)}
			}
			switch opts.Pods {
			case "disabled", "insecure", "verified":
			default:
				return usageError{fmt.Errorf("--dns-pods %q: expected disabled, insecure or verified", opts.Pods)}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return labUp(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.File, "filename", "f", scenarios.Default, "manifest file or built-in name")
	f.StringVar(&opts.Control, "control", control.DefaultAddr, "address of the control API (loopback)")
	f.DurationVar(&opts.DNSTTL, "dns-ttl", 0, "cluster DNS TTL (default 5s as CoreDNS; kubeadm uses 30s)")
	f.BoolVar(&opts.FixedOrder, "dns-fixed-order", false, "keep A records in a stable order instead of shuffling each answer")
	f.StringVar(&opts.Pods, "dns-pods", "disabled", "answers for a-b-c-d.<ns>.pod.cluster.local: disabled, insecure (kubeadm) or verified")
	f.StringVar(&opts.LogLevel, "log-level", "off", "component logs on stderr: off, info or debug")
	return cmd
}

func labUp(ctx context.Context, opts *LabUpOptions) error {
	f, err := scenario.OpenObjects(opts.File)
	if err != nil {
		return err
	}
	cfg := lab.Config{DNSTTL: opts.DNSTTL, DNSFixedOrder: opts.FixedOrder, DNSPods: clusterdns.PodMode(opts.Pods)}
	if lvl, ok := logLevels[opts.LogLevel]; ok {
		cfg.Logger = slog.New(slog.NewTextHandler(opts.Err, &slog.HandlerOptions{Level: lvl}))
	}
	setup, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	l, err := lab.Start(setup, cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	var objs []runtime.Object
	for _, o := range f.Objects {
		objs = append(objs, o.Obj)
	}
	fmt.Fprintf(opts.Err, "starting %d objects from %s ...\n", len(objs), f.Name)
	if err := l.Apply(setup, objs); err != nil {
		return err
	}
	if err := l.WaitReady(setup); err != nil {
		return err
	}
	ctl, err := control.Listen(ctx, opts.Control, l)
	if err != nil {
		return fmt.Errorf("%w (another lab up may hold it; pass --control 127.0.0.1:<port>)", err)
	}
	defer ctl.Shutdown(context.Background())
	printUp(opts.Out, l, ctl.Addr())
	<-ctx.Done()
	fmt.Fprintln(opts.Err, "stopping")
	return nil
}

func printUp(w io.Writer, l *lab.Lab, ctl string) {
	o := control.Snapshot(l)
	dns := l.DNSAddr()
	host, port := splitHostPort(dns)
	fmt.Fprintf(w, "lab is up: pods %v, Services %v\n", l.Cluster.Config().PodCIDR, l.Cluster.Config().ServiceCIDR)
	fmt.Fprintf(w, "cluster DNS %s, control API %s\n\n", dns, ctl)
	printServices(w, o.Services)
	fmt.Fprintf(w, "\ntry:\n")
	if s, ok := exampleService(o.Services); ok {
		fmt.Fprintf(w, "  dig @%s -p %s %s.%s.svc.cluster.local\n", host, port, s.Name, s.Namespace)
	}
	fmt.Fprintf(w, "  pinlab lab get svc,pods,endpointslices%s\n", controlFlag(ctl))
	fmt.Fprintf(w, "stop with Ctrl-C\n")
}

func controlFlag(addr string) string {
	if addr == control.DefaultAddr {
		return ""
	}
	return " --control " + addr
}

func splitHostPort(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return addr, "53"
	}
	return addr[:i], addr[i+1:]
}

// exampleService picks a Service worth a first dig: a headless one with a
// selector if there is one, else any outside kube-system.
func exampleService(svcs []corev1.Service) (corev1.Service, bool) {
	var pick *corev1.Service
	for i, s := range svcs {
		if s.Namespace == "kube-system" {
			continue
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone && len(s.Spec.Selector) > 0 {
			return s, true
		}
		if pick == nil {
			pick = &svcs[i]
		}
	}
	if pick == nil {
		return corev1.Service{}, false
	}
	return *pick, true
}
