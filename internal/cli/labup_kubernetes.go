package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/proxy"
	"k8s.io/client-go/kubernetes"
)

// The control planes lab up runs on (--control-plane).
const (
	controlPlaneEmbedded   = "embedded"
	controlPlaneKubernetes = "kubernetes"
)

// The real control plane's address ranges inside lab up's network
// namespace: kubeadm's defaults. They are local addresses of that namespace
// only, which has no route out; outside it pinlab never sends to them.
// The root command makes them local (netns.Setup) in every pinlab that
// runs in such a namespace.
var (
	kubePodCIDR     = netns.PodPrefix
	kubeServiceCIDR = netns.ServicePrefix
)

// dataplaneUsage is --dataplane's help, on lab up and lab run.
const dataplaneUsage = "with --control-plane kubernetes: what serves ClusterIPs and the cluster DNS: pinlab (its kube-proxy emulation and its DNS), or kube-proxy-nftables or kube-proxy-iptables (the real dataplane: the real kube-proxy, built with the control plane, and the real CoreDNS, built by build/coredns/build.sh; needs Debian's nftables or iptables, and conntrack)"

// checkDataplane checks --dataplane: a known name; a real one only with
// --control-plane kubernetes (pinlab's, the default, goes with either).
// Its errors are usage errors.
func checkDataplane(name string, set bool, controlPlane string) error {
	dp, err := lab.ParseDataplane(name)
	if err != nil {
		return usageError{fmt.Errorf("--dataplane: %w", err)}
	}
	if set && controlPlane != controlPlaneKubernetes && dp != lab.DataplanePinlab {
		return usageError{fmt.Errorf("--dataplane %s needs --control-plane %s: the embedded control plane always runs pinlab's dataplane", name, controlPlaneKubernetes)}
	}
	return nil
}

// The descriptors of the host listeners lab up hands to itself in its
// network namespace: sockets stay in the namespace they were bound in, so
// the copy inside accepts connections made on the host's loopback.
const (
	controlFD = 3 // the control API
	kubeAPIFD = 4 // the API server's forwarder
)

// labUpOnHost is `lab up --control-plane kubernetes` before it enters its
// namespace: it finds the control plane's binaries, binds the control API
// and the API server's forwarder on the host's loopback, and runs itself
// with the same arguments in a new network namespace (and user namespace
// when not root), which it waits for. Everything else happens inside.
func labUpOnHost(ctx context.Context, opts *LabUpOptions) error {
	if _, err := controlplane.BinDir(); err != nil {
		return err // before binding anything
	}
	if err := lab.Dataplane(opts.Dataplane).Check(); err != nil {
		return fmt.Errorf("--dataplane %s: %w", opts.Dataplane, err)
	}
	ctl, err := loopback.Listen(ctx, opts.Control)
	if err != nil {
		return listenError(err)
	}
	defer ctl.Close()
	kube, err := loopback.Listen(ctx, opts.KubeAPI)
	if err != nil {
		return fmt.Errorf("--kube-api %s: %w", opts.KubeAPI, err)
	}
	defer kube.Close()
	var files []*os.File
	for _, ln := range []net.Listener{ctl, kube} {
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			return err
		}
		defer f.Close()
		files = append(files, f)
	}
	return runInNetns(ctx, "lab up", files...)
}

// runInNetns runs this pinlab command again, with the same arguments, in a
// new private network namespace; its exit code is the command's. Callers
// check first that the control plane is built.
func runInNetns(ctx context.Context, verb string, listeners ...*os.File) error {
	// Ctrl-C reaches the child (same process group, and forwarded): wait
	// for it to stop its control plane rather than kill it after a bound.
	code, err := netns.Run(context.WithoutCancel(ctx), netns.Config{Args: os.Args[1:], ExtraFiles: listeners})
	if err != nil {
		return fmt.Errorf("%s --control-plane %s: %w", verb, controlPlaneKubernetes, err)
	}
	if code != ExitOK {
		return exitCode(code)
	}
	return nil
}

// maxControlPlanes bounds the control planes lab run runs at once (about
// 500 MB and a few percent of a core each when idle): the runner runs
// side-by-side variants in batches of this many (runner.Options.AtOnce).
const maxControlPlanes = 4

// variantControlPlanes returns lab run's runner.Options.ControlPlane: a
// control plane per variant, with the variant's own /20 of the pod and
// Service ranges (variant i: pods 10.244.16i.0/20, Services
// 10.96.16i.0/20).
func variantControlPlanes(logger *slog.Logger, dp lab.Dataplane) (func(context.Context, int) (*lab.API, func() error, error), error) {
	bin, err := controlplane.BinDir()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, i int) (*lab.API, func() error, error) {
		pods, err1 := subnet(kubePodCIDR, 20, i)
		svcs, err2 := subnet(kubeServiceCIDR, 20, i)
		if err := errors.Join(err1, err2); err != nil {
			return nil, nil, fmt.Errorf("--control-plane %s runs at most %d variants (a /20 of %v each): %w", controlPlaneKubernetes, 1<<(20-kubePodCIDR.Bits()), kubePodCIDR, err)
		}
		cp, err := controlplane.Start(ctx, controlplane.Config{BinDir: bin, ServiceCIDR: svcs, AdvertiseAddress: lab.NodeIP(pods), Logger: logger})
		if err != nil {
			return nil, nil, err
		}
		client, err := kubernetes.NewForConfig(cp.RESTConfig())
		if err != nil {
			cp.Close()
			return nil, nil, err
		}
		return apiFor(cp, client, pods, svcs, dp), cp.Close, nil
	}, nil
}

// subnet is the i-th /bits range inside p.
func subnet(p netip.Prefix, bits, i int) (netip.Prefix, error) {
	p = p.Masked()
	if !p.Addr().Is4() || bits < p.Bits() || bits > 32 || i < 0 || i >= 1<<(bits-p.Bits()) {
		return netip.Prefix{}, fmt.Errorf("no /%d number %d in %v", bits, i, p)
	}
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += uint32(i) << (32 - bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), bits), nil
}

// kubeBackend is lab up's real control plane, inside its namespace: the
// processes, the forwarder that serves them on the host, and the files
// kubectl and lab exec read.
type kubeBackend struct {
	cp         *controlplane.ControlPlane
	dataplane  lab.Dataplane
	binDir     string
	stateDir   string
	keepLogs   bool // a component failed to start: close keeps the logs
	kubeconfig string
	control    net.Listener // the control API's listener, bound on the host
	kube       net.Listener // the forwarder's, until it starts
	forward    *forwarder   // on the host
	// forwardInside serves the same address inside the namespace.
	forwardInside *forwarder
}

// inheritKube takes the listeners lab up's host side passed in.
func inheritKube() (*kubeBackend, error) {
	ctl, err := inheritedListener(controlFD, "control API")
	if err != nil {
		return nil, err
	}
	kube, err := inheritedListener(kubeAPIFD, "API server forwarder")
	if err != nil {
		ctl.Close()
		return nil, err
	}
	return &kubeBackend{control: ctl, kube: kube}, nil
}

// start starts etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler (the root command has made the namespace's ranges local),
// serves the API server on the host listener and writes the kubeconfig
// (0600) beside the control API's token file. close stops what it
// started, also after an error.
func (b *kubeBackend) start(ctx context.Context, opts *LabUpOptions) (err error) {
	if b.binDir, err = controlplane.BinDir(); err != nil {
		return err
	}
	if b.stateDir, err = os.MkdirTemp("", "pinlab-controlplane-"); err != nil {
		return err
	}
	fmt.Fprintf(opts.Err, "starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler (state and logs in %s) ...\n", b.stateDir)
	started := time.Now()
	b.cp, err = controlplane.Start(ctx, controlplane.Config{
		BinDir: b.binDir, Dir: b.stateDir, ServiceCIDR: kubeServiceCIDR, AdvertiseAddress: lab.NodeIP(kubePodCIDR),
	})
	if err != nil {
		if ctx.Err() == nil {
			// A component failed: its whole log is worth reading; the
			// rest (etcd's data, keys, tokens) goes.
			b.keepLogs = true
			return fmt.Errorf("%w\n(the components' logs are kept in %s; remove it when done)", err, b.stateDir)
		}
		return err
	}
	fmt.Fprintf(opts.Err, "control plane ready in %.1fs\n", time.Since(started).Seconds())
	target, err := apiServerAddr(b.cp)
	if err != nil {
		return err
	}
	b.forward = newForwarder(b.kube, target)
	b.kube = nil // the forwarder's now
	// The same address inside the namespace, so that the kubeconfig
	// serves commands lab exec runs there too (diagnose --kubeconfig,
	// which reaches the pods at their IPs only there).
	inside, err := loopback.Listen(ctx, b.forward.ln.Addr().String())
	if err != nil {
		return fmt.Errorf("lab up: the API server's address inside the namespace: %w", err)
	}
	b.forwardInside = newForwarder(inside, target)
	dir, err := labFilesDir(opts, b.control.Addr().String())
	if err != nil {
		return err
	}
	port := strconv.Itoa(b.control.Addr().(*net.TCPAddr).Port)
	b.kubeconfig = filepath.Join(dir, "kubeconfig-"+port)
	return b.cp.WriteKubeconfig(b.kubeconfig, "https://"+b.forward.ln.Addr().String())
}

// api is the lab's view of the control plane.
func (b *kubeBackend) api() (*lab.API, error) {
	client, err := kubernetes.NewForConfig(b.cp.RESTConfig())
	if err != nil {
		return nil, err
	}
	return apiFor(b.cp, client, kubePodCIDR, kubeServiceCIDR, b.dataplane), nil
}

// apiFor is a lab's view of cp with dataplane dp: the real kube-proxy
// gets the binaries beside the control plane's, its kubeconfig and a log
// in the control plane's state directory; the real CoreDNS (under the
// real kube-proxy) the control plane's admin, to grant it kubeadm's RBAC,
// and a directory there for its Corefile, log and dnstap socket.
func apiFor(cp *controlplane.ControlPlane, client kubernetes.Interface, pods, svcs netip.Prefix, dp lab.Dataplane) *lab.API {
	return &lab.API{Client: client, PodCIDR: pods, ServiceCIDR: svcs, Dataplane: dp, KubeProxy: kubeproxy.Config{
		BinDir: cp.BinDir(), Kubeconfig: cp.KubeProxyKubeconfig(), Log: filepath.Join(cp.Dir(), "kube-proxy.log"),
	}, CoreDNS: coredns.Config{REST: cp.RESTConfig(), Dir: filepath.Join(cp.Dir(), "coredns")}, ControlPlane: cp}
}

// close stops the forwarder and the control plane and removes the files
// lab up wrote for it.
func (b *kubeBackend) close() {
	if b.kube != nil {
		b.kube.Close()
	}
	for _, f := range []*forwarder{b.forward, b.forwardInside} {
		if f != nil {
			f.close()
		}
	}
	if b.cp != nil {
		b.cp.Close()
	}
	if b.kubeconfig != "" {
		os.Remove(b.kubeconfig)
	}
	if b.stateDir != "" {
		removeState(b.stateDir, b.keepLogs)
	}
}

// removeState removes a control plane's state directory, or, with
// keepLogs, everything in it but the components' logs (*.log).
func removeState(dir string, keepLogs bool) {
	if !keepLogs {
		os.RemoveAll(dir)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() || filepath.Ext(e.Name()) != ".log" {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// print tells how to reach the lab from the host: kubectl with the
// kubeconfig, and lab exec for what only the namespace can reach.
func (b *kubeBackend) print(w io.Writer, l *lab.Lab, ctl string, tokenFile string) {
	fmt.Fprintf(w, "\ndataplane: %s\n", dataplaneLine(l))
	fmt.Fprintf(w, "\nKubernetes API (kube-apiserver %s) for kubectl:\n", controlplane.KubernetesVersion)
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", b.kubeconfig)
	fmt.Fprintf(w, "  %s get pods -o wide -A\n", filepath.Join(b.binDir, "kubectl"))
	fmt.Fprintf(w, "pod IPs, ClusterIPs and the cluster DNS are reachable only inside the lab's network namespace:\n")
	fmt.Fprintf(w, "  %s lab exec%s -- CMD ARGS...\n", selfName(), controlFlags(ctl, tokenFile))
}

// dataplaneLine says what serves l's ClusterIPs, for lab up.
func dataplaneLine(l *lab.Lab) string {
	dp := l.Dataplane()
	if dp == lab.DataplanePinlab {
		return "pinlab (its kube-proxy emulation, a relay on each ClusterIP port)"
	}
	return fmt.Sprintf("%s (the real kube-proxy %s in %s mode, log %s; the cluster DNS is CoreDNS %s, at %s, kube-dns's endpoint, log %s); dial ClusterIPs from pod addresses, other sources are masqueraded and fail on lo",
		dp, controlplane.KubernetesVersion, dp.KubeProxyMode(), l.KubeProxyLog(), coredns.Version, l.DNSAddr(), l.CoreDNS.Log())
}

// inheritedListener is the listener lab up's host side passed at fd.
func inheritedListener(fd int, what string) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), what)
	if f == nil {
		return nil, fmt.Errorf("no %s listener handed over at descriptor %d", what, fd)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("the %s listener handed over at descriptor %d: %w", what, fd, err)
	}
	return ln, nil
}

// labFilesDir is where lab up keeps the files other commands read: beside
// the control API's token file.
func labFilesDir(opts *LabUpOptions, ctl string) (string, error) {
	if opts.TokenFile != "" {
		return filepath.Dir(opts.TokenFile), nil
	}
	p, err := control.TokenPath(ctl)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(p)
	return dir, os.MkdirAll(dir, 0o700)
}

// apiServerAddr is the API server's "IP:port" inside the namespace.
func apiServerAddr(cp *controlplane.ControlPlane) (string, error) {
	u, err := url.Parse(cp.URL())
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("lab up: API server address %q: %v", cp.URL(), err)
	}
	return u.Host, nil
}

// forwarder copies connections accepted on a host listener to the API
// server inside the namespace, byte for byte (TLS passes through: kubectl
// checks the API server's own certificate). It owns one goroutine per
// connection direction and the accept loop; close stops them all.
type forwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// maxForwarded bounds the connections the forwarder holds at once.
const maxForwarded = 256

func newForwarder(ln net.Listener, target string) *forwarder {
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.accept)
	return f
}

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: back off
			continue
		}
		if !f.track(c) {
			c.Close()
			continue
		}
		f.wg.Go(func() { f.serve(c) })
	}
}

// track records c; false when closed or at the cap.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.conns) >= maxForwarded {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

func (f *forwarder) serve(c net.Conn) {
	defer f.untrack(c)
	up, err := loopback.Dialer{Timeout: 5 * time.Second}.DialContext(context.Background(), f.target)
	if err != nil {
		c.Close()
		return
	}
	if !f.track(up) {
		up.Close()
		c.Close()
		return
	}
	defer f.untrack(up)
	proxy.Relay(c.(*net.TCPConn), up.(*net.TCPConn))
}

// close stops accepting, closes every connection and waits for the
// goroutines.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
}
