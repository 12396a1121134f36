package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/imagebuild"
	"github.com/pinlab/pinlab/internal/labrun"
	"github.com/pinlab/pinlab/internal/labup"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/scenarios"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
)

// LabUpOptions are the inputs of `pinlab lab up`.
type LabUpOptions struct {
	// File is a manifest file, a built-in name, or "-" for standard input.
	File string
	// Control is the control API address.
	Control string
	// TokenFile is where the control API's token is written; empty means
	// control.TokenPath of the bound address.
	TokenFile string
	// DNSTTL is the cluster DNS TTL, whole seconds from 0s to 1h; used only
	// if DNSTTLSet (otherwise the DNS default, 5s). 0s means TTL 0.
	DNSTTL    time.Duration
	DNSTTLSet bool
	// FixedOrder keeps DNS answer order stable.
	FixedOrder bool
	// Pods is the DNS pods mode: disabled, insecure or verified.
	Pods string
	// DNSCache puts CoreDNS's cache plugin in front of the DNS: off,
	// kubeadm, kubeadm-1.31, coredns or a TTL cap (see dnscache.go); the
	// others tune it.
	DNSCache, DNSCacheSuccess, DNSCacheDenial string
	DNSCacheKeepTTL                           bool
	LogLevel                                  string
	// UI serves a live dashboard from the control API's address.
	UI bool
	// ControlPlane is "embedded" (the in-process API and controllers) or
	// "kubernetes" (etcd, kube-apiserver, kube-controller-manager and
	// kube-scheduler in a private network namespace; see package
	// kubelab). KubeAPI is where the host reaches that API
	// server (inside 127.0.0.0/8; port 0 picks one).
	ControlPlane, KubeAPI string
	// Dataplane is what serves ClusterIPs on the real control plane:
	// pinlab, kube-proxy-nftables or kube-proxy-iptables (the real
	// kube-proxy and CoreDNS); DataplaneSet when the flag was given (a
	// real one is valid only with ControlPlane kubernetes).
	Dataplane    string
	DataplaneSet bool
	// PodNetwork is how the real control plane's pods are networked:
	// shared or netns; PodNetworkSet when the flag was given.
	PodNetwork    string
	PodNetworkSet bool
	kubeAPISet    bool // --kube-api was given
	// Images is an OCI layout of the pinlab image (`pinlab image build
	// --oci-layout DIR`); "" means none. imageDigests are its digests, read
	// by check.
	Images       string
	imageDigests []string

	// In is read when File is "-".
	In       io.Reader
	Out, Err io.Writer
}

// stdinName is how manifests read from standard input are named in
// messages.
const stdinName = "<stdin>"

// NewCmdLabUp returns `pinlab lab up`.
func NewCmdLabUp(stdout, stderr io.Writer, runF func(context.Context, *LabUpOptions) error) *cobra.Command {
	opts := &LabUpOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "up [-f FILE|NAME|-]",
		Short: "Run a mini-cluster from manifests until interrupted, to dig and dial by hand",
		Long: fmt.Sprintf(`Start one mini-cluster from Kubernetes manifests (Namespace, Service,
Deployment, StatefulSet, EndpointSlice; a Scenario document is checked but
not run) and
keep it running until Ctrl-C. It prints the cluster DNS address and the
Services with their VIPs, so you can query it with dig and point your own
clients at it; pinlab lab get/scale/delete/unready/ready change it from
another terminal through its control API, which answers only requests with
the token lab up writes to a file only you can read (it prints the path;
see docs/control.md). -f - reads the manifests from standard input.
Built-ins: %s.`, strings.Join(scenarios.Manifests(), ", ")),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return exit.UsageError(fmt.Errorf("lab up takes no arguments; to start %s use: pinlab lab up -f %s", args[0], args[0]))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DNSTTLSet = cmd.Flags().Changed("dns-ttl")
			opts.DataplaneSet = cmd.Flags().Changed("dataplane")
			opts.PodNetworkSet = cmd.Flags().Changed("pod-network")
			opts.In = cmd.InOrStdin()
			opts.kubeAPISet = cmd.Flags().Changed("kube-api")
			if err := opts.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return labUp(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.File, "filename", "f", scenarios.Default, "manifest file, built-in name, or - for standard input")
	f.StringVar(&opts.Control, "control", control.DefaultAddr, "address of the control API (loopback)")
	f.StringVar(&opts.TokenFile, "token-file", "", "where to write the control API's token, mode 0600 (default: one file per control address in $XDG_RUNTIME_DIR/pinlab, else ~/.config/pinlab)")
	f.DurationVar(&opts.DNSTTL, "dns-ttl", 0, "cluster DNS TTL in whole seconds, 0s to 3600s (default 5s as CoreDNS; kubeadm uses 30s; 0s disables caching)")
	f.BoolVar(&opts.FixedOrder, "dns-fixed-order", false, "keep A records in a stable order instead of shuffling each answer")
	f.StringVar(&opts.Pods, "dns-pods", "disabled", "answers for a-b-c-d.<ns>.pod.cluster.local: disabled, insecure (kubeadm) or verified")
	addDNSCacheFlags(f, opts)
	f.StringVar(&opts.LogLevel, "log-level", "off", "component logs on stderr: off, info or debug")
	f.StringVar(&opts.ControlPlane, "control-plane", controlPlaneEmbedded, "embedded (in-process API and controllers) or kubernetes (real etcd, kube-apiserver, kube-controller-manager and kube-scheduler in a private network namespace, served to kubectl; build them first with build/controlplane/build.sh)")
	f.StringVar(&opts.Dataplane, "dataplane", labrun.DataplanePinlab, dataplaneUsage)
	f.StringVar(&opts.PodNetwork, "pod-network", "shared", podNetworkUsage)
	f.StringVar(&opts.KubeAPI, "kube-api", "127.0.0.1:0", "with --control-plane kubernetes: where kubectl reaches the API server (inside 127.0.0.0/8; port 0 picks a free one)")
	f.StringVar(&opts.Images, "images", "", "an OCI layout of the pinlab image (pinlab image build --oci-layout DIR): the lab's node runs pods whose image is pinned to its digest (any repository), as a node that has pulled it")
	f.BoolVar(&opts.UI, "ui", false, "serve a live dashboard (objects, calls/s per pod, events, the control verbs) from the control API's address; its address, with the token, is printed")
	return cmd
}

// check validates the flags before anything starts; its errors are usage
// errors.
func (o *LabUpOptions) check() error {
	if _, ok := logLevels[o.LogLevel]; !ok && o.LogLevel != "off" {
		return exit.UsageError(fmt.Errorf("--log-level %q: expected off, info or debug", o.LogLevel))
	}
	switch o.Pods {
	case "disabled", "insecure", "verified":
	default:
		return exit.UsageError(fmt.Errorf("--dns-pods %q: expected disabled, insecure or verified", o.Pods))
	}
	if o.DNSTTLSet {
		if err := labup.CheckTTL(o.DNSTTL); err != nil {
			return exit.UsageError(fmt.Errorf("--dns-ttl %v: %w", o.DNSTTL, err))
		}
	}
	if err := o.dns().Check(); err != nil {
		return exit.UsageError(err)
	}
	switch o.ControlPlane {
	case controlPlaneEmbedded, controlPlaneKubernetes:
	default:
		return exit.UsageError(fmt.Errorf("--control-plane %q: expected %s or %s", o.ControlPlane, controlPlaneEmbedded, controlPlaneKubernetes))
	}
	if err := checkDataplane(o.Dataplane, o.DataplaneSet, o.ControlPlane); err != nil {
		return err
	}
	if err := checkPodNetwork(o.PodNetwork, o.PodNetworkSet, o.ControlPlane); err != nil {
		return err
	}
	if o.kubeAPISet && o.ControlPlane != controlPlaneKubernetes {
		return exit.UsageError(fmt.Errorf("--kube-api %s: only with --control-plane %s (the embedded control plane serves no Kubernetes API)", o.KubeAPI, controlPlaneKubernetes))
	}
	if err := loopback.CheckAddr(o.KubeAPI); err != nil {
		return exit.UsageError(fmt.Errorf("--kube-api %q: expected IP:port inside 127.0.0.0/8 such as 127.0.0.1:6443 (%v)", o.KubeAPI, err))
	}
	if err := loopback.CheckAddr(o.Control); err != nil {
		return exit.UsageError(fmt.Errorf("--control %q: expected IP:port inside 127.0.0.0/8 such as %s (%v)", o.Control, control.DefaultAddr, err))
	}
	if o.Images != "" {
		d, err := imagebuild.LayoutDigests(o.Images, runtime.GOOS+"/"+runtime.GOARCH)
		if err != nil {
			return exit.UsageError(fmt.Errorf("--images: %w", err))
		}
		o.imageDigests = d
	}
	return nil
}

// dns is the cluster DNS the flags ask for.
func (o *LabUpOptions) dns() labup.DNS {
	return labup.DNS{TTL: o.dnsTTL(), FixedOrder: o.FixedOrder, Pods: o.Pods,
		Cache: o.DNSCache, CacheSuccess: o.DNSCacheSuccess, CacheDenial: o.DNSCacheDenial, CacheKeepTTL: o.DNSCacheKeepTTL}
}

// dnsTTL is labup.DNS.TTL for the flags: 0 keeps the default, a
// negative value asks for TTL 0.
func (o *LabUpOptions) dnsTTL() time.Duration {
	if o.DNSTTLSet && o.DNSTTL == 0 {
		return -1
	}
	return o.DNSTTL
}

func labUp(ctx context.Context, opts *LabUpOptions) error {
	eo := labup.Options{
		Manifests: opts.File, In: opts.In, Control: opts.Control, TokenFile: opts.TokenFile,
		DNS: opts.dns(),
		UI:  opts.UI, ControlPlane: opts.ControlPlane, KubeAPI: opts.KubeAPI, Dataplane: opts.Dataplane, PodNetwork: opts.PodNetwork,
		Images:   opts.imageDigests,
		Progress: opts.Err, Stopping: func() {
			if labUpStopping != nil {
				labUpStopping()
			}
		},
		Up: func(r labup.Ready) { printUp(opts.Out, r) },
	}
	if lvl, ok := logLevels[opts.LogLevel]; ok {
		eo.Logger = slog.New(slog.NewTextHandler(opts.Err, &slog.HandlerOptions{Level: lvl}))
	}
	return labup.Run(ctx, eo)
}

// labUpStopping is called once lab up's control API has stopped, before
// its lab closes; a test seam, to see what the API answers by then.
var labUpStopping func()

// selfName names this executable in the commands pinlab prints for the
// user to run: its path, since `go build -o pinlab` does not put it on
// PATH (and nsenter, under lab exec, finds only what PATH has); "pinlab"
// when the path is unknown.
func selfName() string {
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return "pinlab"
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// printUp says the lab is up and how to use it. On a real control plane
// the commands that must run inside the lab's network namespace (its pod
// IPs and ClusterIPs are reachable only there) go through lab exec, and
// kubectl gets the kubeconfig.
func printUp(w io.Writer, r labup.Ready) {
	prog, ctl := selfName(), controlFlags(r.Control, r.TokenFile)
	via := ""
	if r.Kube != nil {
		via = prog + " lab exec" + ctl + " -- "
	}
	host, port := splitHostPort(r.DNS)
	fmt.Fprintf(w, "lab is up: pods %v, Services %v\n", r.PodCIDR, r.ServiceCIDR)
	dns := r.DNS
	if r.CoreDNSVersion != "" {
		dns += " (CoreDNS " + r.CoreDNSVersion + ")"
	}
	fmt.Fprintf(w, "cluster DNS %s, control API %s (token in %s)\n", dns, r.Control, r.TokenFile)
	if r.Dashboard != "" {
		fmt.Fprintf(w, "dashboard: %s\n", r.Dashboard)
	}
	fmt.Fprintln(w)
	printServices(w, r.Objects.Services)
	fmt.Fprintf(w, "\ntry:\n")
	s, ok := exampleService(r.Objects.Services)
	if ok {
		fmt.Fprintf(w, "  %sdig @%s -p %s %s.%s.svc.cluster.local\n", via, host, port, s.Name, s.Namespace)
	}
	fmt.Fprintf(w, "  %s lab get svc,pods,endpointslices%s%s\n", prog, namespaceFlag(r.Namespaces), ctl)
	if len(control.MetricsTargets(r.Objects.Pods)) > 0 {
		fmt.Fprintf(w, "  %s lab targets -A%s > targets.json   # Prometheus file_sd targets of the pods' metrics ports\n", prog, ctl)
	}
	if ok && len(s.Spec.Selector) > 0 && len(s.Spec.Ports) > 0 {
		fmt.Fprintf(w, "  %s%s lab load %s:%d -n %s%s --duration 60s &   # gRPC clients calling it for a minute\n", via, prog, s.Name, s.Spec.Ports[0].Port, s.Namespace, ctl)
		fmt.Fprintf(w, "  %s%s diagnose %s -n %s --lab%s     # pinned or balanced, and why\n", via, prog, s.Name, s.Namespace, ctl)
	}
	fmt.Fprintf(w, "stop with Ctrl-C\n")
	if r.Kube != nil {
		printKube(w, r, prog, ctl)
	}
}

// namespaceFlag is the lab get flag that shows objects in nss: none for
// the default namespace, -n for one other, -A for several.
func namespaceFlag(nss []string) string {
	switch {
	case len(nss) > 1:
		return " -A"
	case len(nss) == 1 && nss[0] != "default":
		return " -n " + nss[0]
	}
	return ""
}

// controlFlags are the lab client flags that reach the lab at addr with the
// token in tokenFile: none for the defaults.
func controlFlags(addr, tokenFile string) string {
	var flags string
	if addr != control.DefaultAddr {
		flags = " --control " + addr
	}
	if def, err := control.TokenPath(addr); err != nil || def != tokenFile {
		flags += " --token-file " + tokenFile
	}
	return flags
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
