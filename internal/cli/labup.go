package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/scenarios"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
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
	// kube-scheduler in a private network namespace; see
	// labup_kubernetes.go). KubeAPI is where the host reaches that API
	// server (inside 127.0.0.0/8; port 0 picks one).
	ControlPlane, KubeAPI string
	// Dataplane is what serves ClusterIPs on the real control plane:
	// pinlab, kube-proxy-nftables or kube-proxy-iptables (see
	// lab.API.Dataplane); DataplaneSet when the flag was given (it is
	// valid only with ControlPlane kubernetes).
	Dataplane    string
	DataplaneSet bool
	kubeAPISet   bool // --kube-api was given

	dnsCache *clusterdns.CacheConfig // DNSCache* parsed by check

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
			return usageError{fmt.Errorf("lab up takes no arguments; to start %s use: pinlab lab up -f %s", args[0], args[0])}
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DNSTTLSet = cmd.Flags().Changed("dns-ttl")
			opts.DataplaneSet = cmd.Flags().Changed("dataplane")
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
	f.StringVar(&opts.Dataplane, "dataplane", string(lab.DataplanePinlab), dataplaneUsage)
	f.StringVar(&opts.KubeAPI, "kube-api", "127.0.0.1:0", "with --control-plane kubernetes: where kubectl reaches the API server (inside 127.0.0.0/8; port 0 picks a free one)")
	f.BoolVar(&opts.UI, "ui", false, "serve a live dashboard (objects, calls/s per pod, events, the control verbs) from the control API's address; its address, with the token, is printed")
	return cmd
}

// check validates the flags before anything starts; its errors are usage
// errors.
func (o *LabUpOptions) check() error {
	if _, ok := logLevels[o.LogLevel]; !ok && o.LogLevel != "off" {
		return usageError{fmt.Errorf("--log-level %q: expected off, info or debug", o.LogLevel)}
	}
	switch o.Pods {
	case "disabled", "insecure", "verified":
	default:
		return usageError{fmt.Errorf("--dns-pods %q: expected disabled, insecure or verified", o.Pods)}
	}
	if o.DNSTTLSet {
		if err := checkTTL(o.DNSTTL); err != nil {
			return usageError{fmt.Errorf("--dns-ttl %v: %w", o.DNSTTL, err)}
		}
	}
	if err := o.parseDNSCache(); err != nil {
		return usageError{err}
	}
	switch o.ControlPlane {
	case controlPlaneEmbedded, controlPlaneKubernetes:
	default:
		return usageError{fmt.Errorf("--control-plane %q: expected %s or %s", o.ControlPlane, controlPlaneEmbedded, controlPlaneKubernetes)}
	}
	if err := checkDataplane(o.Dataplane, o.DataplaneSet, o.ControlPlane); err != nil {
		return err
	}
	if o.kubeAPISet && o.ControlPlane != controlPlaneKubernetes {
		return usageError{fmt.Errorf("--kube-api %s: only with --control-plane %s (the embedded control plane serves no Kubernetes API)", o.KubeAPI, controlPlaneKubernetes)}
	}
	if err := loopback.CheckAddr(o.KubeAPI); err != nil {
		return usageError{fmt.Errorf("--kube-api %q: expected IP:port inside 127.0.0.0/8 such as 127.0.0.1:6443 (%v)", o.KubeAPI, err)}
	}
	if err := loopback.CheckAddr(o.Control); err != nil {
		return usageError{fmt.Errorf("--control %q: expected IP:port inside 127.0.0.0/8 such as %s (%v)", o.Control, control.DefaultAddr, err)}
	}
	return nil
}

// checkTTL accepts what CoreDNS's "ttl" option accepts: whole seconds from
// 0 to 3600.
func checkTTL(d time.Duration) error {
	switch {
	case d < 0:
		return errors.New("must not be negative; expected whole seconds from 0s to 3600s")
	case d%time.Second != 0:
		return errors.New("DNS TTLs are whole seconds; expected e.g. 0s, 5s or 30s")
	case d > clusterdns.MaxTTL:
		return fmt.Errorf("above the maximum %v (CoreDNS's limit)", clusterdns.MaxTTL)
	}
	return nil
}

// dnsTTL is the lab.Config.DNSTTL for the flags: 0 keeps the default, a
// negative value asks for TTL 0.
func (o *LabUpOptions) dnsTTL() time.Duration {
	if o.DNSTTLSet && o.DNSTTL == 0 {
		return -1
	}
	return o.DNSTTL
}

func labUp(ctx context.Context, opts *LabUpOptions) error {
	onKube := opts.ControlPlane == controlPlaneKubernetes
	if onKube && !netns.Inside() {
		return labUpOnHost(ctx, opts)
	}
	f, err := await(ctx, inputName(opts.File), func() (*scenario.File, error) { return openObjects(ctx, opts) })
	if err != nil {
		return err
	}
	for _, w := range warnings(f) {
		fmt.Fprintf(opts.Err, "warning: %v\n", w)
	}
	var board *labBoard
	if opts.UI {
		board = newLabBoard("pinlab lab up: " + f.Name)
	}
	// "stopped" is said once everything is (the control plane's close
	// below is deferred too, and runs first).
	stopped := false
	defer func() {
		if stopped {
			fmt.Fprintln(opts.Err, "stopped")
		}
	}()
	var kube *kubeBackend
	var ctl net.Listener
	if onKube {
		if kube, err = inheritKube(); err != nil {
			return err
		}
		kube.dataplane = lab.Dataplane(opts.Dataplane)
		defer kube.close()
		ctl = kube.control
	}
	api, err := serveControl(ctx, opts, board, ctl)
	if err != nil {
		return interrupted(ctx, f, err)
	}
	// Fixed ClusterIPs need the lab range they lie in (0: the first free one).
	cfg := lab.Config{Range: f.Range(), DNS: clusterdns.Config{TTL: opts.dnsTTL(), FixedOrder: opts.FixedOrder, Pods: clusterdns.PodMode(opts.Pods), Cache: opts.dnsCache}}
	if lvl, ok := logLevels[opts.LogLevel]; ok {
		cfg.Logger = slog.New(slog.NewTextHandler(opts.Err, &slog.HandlerOptions{Level: lvl}))
	}
	if kube != nil {
		err = kube.start(ctx, opts)
		if err == nil {
			cfg.API, err = kube.api()
		}
		if err != nil {
			api.stop()
			return interrupted(ctx, f, err)
		}
	}
	var watch cache.ResourceEventHandler
	if board != nil {
		board.configure(&cfg)
		watch = board.pods.handlers()
	}
	l, err := start(ctx, opts, cfg, f, watch)
	if err != nil {
		api.stop()
		return interrupted(ctx, f, err)
	}
	api.srv.Serve(l)
	if api.inside != nil {
		api.inside.Serve(l)
	}
	if board != nil {
		board.lab.Store(l)
	}
	via, prog := "", selfName()
	if kube != nil {
		via = prog + " lab exec" + controlFlags(api.srv.Addr(), api.tokenFile) + " -- "
	}
	printUp(opts.Out, l, api, f, via, prog)
	if kube != nil {
		kube.print(opts.Out, l, api.srv.Addr(), api.tokenFile)
	}
	var failed error
	select {
	case <-ctx.Done():
		fmt.Fprintln(opts.Err, "stopping")
	case <-l.Failed():
		// A part of the lab stopped (kube-proxy, CoreDNS, a control
		// plane process): what the lab serves no longer follows the API,
		// so it stops rather than run on stale rules.
		failed = l.Err()
		fmt.Fprintf(opts.Err, "pinlab: lab up: %v\nstopping the lab\n", failed)
	}
	// The API stops first (503, then refused), so nothing changes the lab
	// while it closes; the dashboard's streams end before it.
	api.stop()
	closeLab(l)
	stopped = true
	if failed != nil {
		return exitCode(ExitError) // said above, when it happened
	}
	return nil
}

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

// closeLab closes lab up's lab once it is interrupted; a test seam, to see
// what the API answers by then.
var closeLab = func(l *lab.Lab) { l.Close() }

// controlAPI is lab up's control API, the file its token is kept in, and
// the dashboard it serves (nil without --ui).
type controlAPI struct {
	srv *control.Server
	// inside is the same API on the same address inside lab up's network
	// namespace (with --control-plane kubernetes), for the pinlab commands
	// lab exec runs there; nil on the host.
	inside    *control.Server
	tokenFile string
	token     string
	board     *labBoard
	stopBoard context.CancelFunc
	boardRun  sync.WaitGroup
}

// serveControl claims the control address (or serves ln, bound on it
// already), then writes the token file: only the holder of the address
// writes it. With a board, the API serves
// its dashboard too.
func serveControl(ctx context.Context, opts *LabUpOptions, board *labBoard, ln net.Listener) (*controlAPI, error) {
	token := control.NewToken()
	cfg := control.Config{Addr: opts.Control, Token: token, Listener: ln}
	if netns.Inside() {
		cfg.NetnsPID = os.Getpid()
	}
	if board != nil {
		cfg.UI = board.board.Handler()
	}
	srv, err := control.Listen(ctx, cfg)
	if err != nil {
		return nil, listenError(err)
	}
	api := &controlAPI{srv: srv, tokenFile: opts.TokenFile, token: token, board: board}
	if ln != nil {
		icfg := cfg
		icfg.Listener, icfg.Addr, icfg.UI = nil, srv.Addr(), nil
		if api.inside, err = control.Listen(ctx, icfg); err != nil {
			srv.Shutdown(context.Background())
			return nil, fmt.Errorf("lab up: the control API inside the lab's network namespace: %w", err)
		}
	}
	if board != nil {
		bctx, cancel := context.WithCancel(context.Background())
		api.stopBoard = cancel
		api.boardRun.Go(func() { board.board.Run(bctx) })
	}
	mkdir := api.tokenFile == "" // the default place is ours to create; a path given is not
	if mkdir {
		api.tokenFile, err = control.TokenPath(srv.Addr())
	}
	if err == nil {
		err = control.WriteToken(api.tokenFile, token, mkdir)
	}
	if err != nil {
		api.tokenFile = "" // not written: nothing of ours to remove
		api.stop()
		return nil, fmt.Errorf("lab up: %w (pass --token-file)", err)
	}
	return api, nil
}

// stopTimeout bounds how long stopping the control API waits for the
// requests in progress.
const stopTimeout = 5 * time.Second

// stop ends the dashboard's streams, shuts the API down and removes the
// token file, now useless.
func (a *controlAPI) stop() {
	if a.stopBoard != nil {
		a.board.board.Finish([]string{"The lab has stopped."})
		a.stopBoard()
		a.boardRun.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if a.inside != nil {
		a.inside.Shutdown(ctx)
	}
	a.srv.Shutdown(ctx)
	if a.tokenFile != "" {
		os.Remove(a.tokenFile)
	}
}

// interrupted replaces err, a start-up failure, by the interruption that
// caused it once ctx has ended: what was still short then is no failure.
func interrupted(ctx context.Context, f *scenario.File, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("lab up: interrupted while starting the lab from %s; everything it started is stopped", f.Name)
}

// start starts a lab and applies f's objects, waiting until every pod is
// ready and the data plane serves them. On error the lab is closed.
func start(ctx context.Context, opts *LabUpOptions, cfg lab.Config, f *scenario.File, watch cache.ResourceEventHandler) (*lab.Lab, error) {
	setup, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	l, err := lab.Start(setup, cfg)
	if err != nil {
		return nil, err
	}
	if watch != nil {
		if err := l.WatchPods(watch); err != nil {
			l.Close()
			return nil, err
		}
	}
	var objs []runtime.Object
	for _, o := range f.Objects {
		objs = append(objs, o.Obj)
	}
	fmt.Fprintf(opts.Err, "starting %s from %s ...\n", plural(len(objs), "object"), f.Name)
	if err = l.Apply(setup, objs); err != nil {
		err = applyError(f, err)
	} else {
		err = l.WaitReady(setup, neverReady(f)...)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// openObjects reads and checks the manifests (a file, a built-in, or
// standard input for "-"), including what the API server would reject,
// before anything starts. Reading ends when ctx does.
func openObjects(ctx context.Context, opts *LabUpOptions) (*scenario.File, error) {
	var f *scenario.File
	var err error
	if opts.File == "-" {
		data, rerr := scenario.ReadAll(ctx, inputName(opts.File), opts.In)
		if rerr != nil {
			return nil, fmt.Errorf("lab up: %w", rerr)
		}
		f, err = scenario.LoadObjects(stdinName, data)
	} else {
		f, err = scenario.OpenObjects(ctx, opts.File)
	}
	if errors.Is(err, scenario.ErrNotFound) {
		return nil, usageError{err} // as lab run: exit 2
	}
	if err != nil {
		return nil, err
	}
	if len(f.Objects) == 0 {
		return nil, fmt.Errorf("%s: no objects in it; expected Kubernetes manifests (Namespace, Service, Deployment, StatefulSet, EndpointSlice)", f.Name)
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
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return nil
	}
	if need := plan.FDsPerLab + control.DefaultMaxConns + plan.FDsPerPod*pods; uint64(need) > lim.Cur*8/10 {
		return fmt.Errorf("%s: %d pods would hold about %d file descriptors before any client connects, more than 80%% of the %d this process may open (ulimit -n); raise it or lower the replicas", f.Name, pods, need, lim.Cur)
	}
	return nil
}

// inputName names -f's argument in messages.
func inputName(file string) string {
	if file == "-" {
		return "standard input"
	}
	return file
}

// listenError explains a control API bind failure; only an address in use
// can be another lab's.
func listenError(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w (another lab up may hold it; pass --control 127.0.0.1:<port>)", err)
	}
	return err
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// printUp says the lab is up and how to use it; via prefixes the commands
// that must run inside the lab's network namespace (on a real control
// plane: its pod IPs and ClusterIPs are reachable only there), and prog
// names pinlab in them.
func printUp(w io.Writer, l *lab.Lab, api *controlAPI, f *scenario.File, via, prog string) {
	o := control.Snapshot(l)
	dns := l.DNSAddr()
	host, port := splitHostPort(dns)
	fmt.Fprintf(w, "lab is up: pods %v, Services %v\n", l.PodCIDR(), l.ServiceCIDR())
	ctl := api.srv.Addr()
	if l.CoreDNS != nil {
		dns += " (CoreDNS " + coredns.Version + ")"
	}
	fmt.Fprintf(w, "cluster DNS %s, control API %s (token in %s)\n", dns, ctl, api.tokenFile)
	if api.board != nil {
		fmt.Fprintf(w, "dashboard: %s\n", dashboardURL(ctl, api.token))
	}
	fmt.Fprintln(w)
	printServices(w, o.Services)
	fmt.Fprintf(w, "\ntry:\n")
	if s, ok := exampleService(o.Services); ok {
		fmt.Fprintf(w, "  %sdig @%s -p %s %s.%s.svc.cluster.local\n", via, host, port, s.Name, s.Namespace)
	}
	fmt.Fprintf(w, "  %s lab get svc,pods,endpointslices%s%s\n", prog, namespaceFlag(f), controlFlags(ctl, api.tokenFile))
	if len(MetricsTargets(o.Pods)) > 0 {
		fmt.Fprintf(w, "  %s lab targets -A%s > targets.json   # Prometheus file_sd targets of the pods' metrics ports\n", prog, controlFlags(ctl, api.tokenFile))
	}
	if s, ok := exampleService(o.Services); ok && len(s.Spec.Selector) > 0 && len(s.Spec.Ports) > 0 {
		fmt.Fprintf(w, "  %s%s lab load %s:%d -n %s%s &   # gRPC clients calling it\n", via, prog, s.Name, s.Spec.Ports[0].Port, s.Namespace, controlFlags(ctl, api.tokenFile))
		fmt.Fprintf(w, "  %s%s diagnose %s -n %s --lab%s     # pinned or balanced, and why\n", via, prog, s.Name, s.Namespace, controlFlags(ctl, api.tokenFile))
	}
	fmt.Fprintf(w, "stop with Ctrl-C\n")
}

// namespaceFlag is the lab get flag that shows f's objects: none for the
// default namespace, -n for one other, -A for several.
func namespaceFlag(f *scenario.File) string {
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
