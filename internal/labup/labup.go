// Package labup is the engine behind `pinlab lab up`: it reads Kubernetes
// manifests (package scenario) and checks them as the API server would,
// starts one lab (package lab) on the embedded control plane or on a real
// one (package kubelab), applies the manifests and waits until every pod
// is ready and the dataplane serves it, serves the lab's control API
// (package control) and, if asked, its live dashboard, and keeps it all
// running until the context ends or a part of the lab fails. What the
// CLI prints once the lab is up comes to it as a Ready.
//
// Errors that are mistakes in how the command was called are marked
// exit.UsageError; on a real control plane the command runs again in the
// lab's network namespace and an exit code there returns as exit.Code.
package labup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/scenario"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// ControlPlaneKubernetes is Options.ControlPlane for a real control plane.
const ControlPlaneKubernetes = "kubernetes"

// Options configure Run.
type Options struct {
	// Manifests is a manifest file's path, a built-in's name, or "-" for
	// In.
	Manifests string
	In        io.Reader
	// Control is the control API's address (inside 127.0.0.0/8).
	Control string
	// TokenFile is where its token is written (mode 0600); "" means
	// control.TokenPath of the bound address.
	TokenFile string
	// DNS configures the cluster DNS.
	DNS DNS
	// Logger receives component logs; nil discards them.
	Logger *slog.Logger
	// UI serves a live dashboard from the control API's address.
	UI bool
	// ControlPlane is "embedded" ("" too) or ControlPlaneKubernetes (a
	// real control plane in a private network namespace), which KubeAPI
	// (inside 127.0.0.0/8; port 0 picks one) serves to the host's
	// kubectl, with Dataplane serving its ClusterIPs.
	ControlPlane string
	KubeAPI      string
	Dataplane    string
	// PodNetwork is how the real control plane's pods are networked:
	// "shared" ("" too) or "netns" (see labrun.Options.PodNetwork).
	PodNetwork string
	// Images are the digests of the pinlab image the lab's node holds
	// (kubelet.Config.Images): pods pinned to one run as image pinlab.
	Images []string
	// Up, if not nil, is told once the lab is up what to tell the user.
	Up func(Ready)
	// Progress, if not nil, receives what happens on the way, a line
	// each: what starts, warnings about the manifests, "stopping",
	// "stopped".
	Progress io.Writer
	// Stopping, if not nil, is called once the control API has stopped
	// answering, before the lab closes.
	Stopping func()
}

// DNS configures lab up's cluster DNS, as its flags say it.
type DNS struct {
	// TTL of answers, whole seconds from 0 to 1h (CheckTTL); zero keeps
	// the default (5s, as CoreDNS), negative is TTL 0.
	TTL time.Duration
	// FixedOrder keeps A records in a stable order.
	FixedOrder bool
	// Pods is the pods mode: "disabled" ("" too), "insecure" or
	// "verified".
	Pods string
	// Cache, CacheSuccess, CacheDenial and CacheKeepTTL put CoreDNS's
	// cache plugin in front, as ParseDNSCache reads them; Cache "" or
	// "off" is none.
	Cache, CacheSuccess, CacheDenial string
	CacheKeepTTL                     bool
}

// config is the lab's DNS configuration for d.
func (d DNS) config() (clusterdns.Config, error) {
	cache, err := ParseDNSCache(cmp.Or(d.Cache, "off"), d.CacheSuccess, d.CacheDenial, d.CacheKeepTTL)
	return clusterdns.Config{TTL: d.TTL, FixedOrder: d.FixedOrder, Pods: clusterdns.PodMode(d.Pods), Cache: cache}, err
}

// Check checks d before anything starts; its errors name the flag.
func (d DNS) Check() error {
	_, err := d.config()
	return err
}

// Ready is a lab that is up, as the user reaches it.
type Ready struct {
	// PodCIDR and ServiceCIDR are the lab's networks; DNS the cluster
	// DNS's "IP:port".
	PodCIDR, ServiceCIDR netip.Prefix
	DNS                  string
	// Dataplane is what serves ClusterIPs and the DNS (lab.Dataplanes);
	// under the real one KubeProxyMode is kube-proxy's mode, DataplaneLogs
	// the log file of each of its processes (kube-proxy's, CoreDNS's) and
	// CoreDNSVersion the real CoreDNS's version.
	Dataplane      string
	RealDataplane  bool // the real kube-proxy and CoreDNS, not pinlab's
	KubeProxyMode  string
	DataplaneLogs  map[string]string
	CoreDNSVersion string
	// Objects are the lab's objects once ready; Namespaces those the
	// manifests' objects are in, in their order.
	Objects    control.Objects
	Namespaces []string
	// Control is the control API's address, TokenFile its token's file,
	// Dashboard the dashboard's URL with the token ("" without UI).
	Control, TokenFile, Dashboard string
	// Kube is set on a real control plane.
	Kube *KubeReady
}

// KubeReady is the real control plane of a lab that is up.
type KubeReady struct {
	// Version is kube-apiserver's; Kubeconfig the file kubectl on the host
	// reads, Kubectl the kubectl built beside the control plane.
	Version, Kubeconfig, Kubectl string
	// PodNetwork is how the pods are networked: "shared" or "netns".
	PodNetwork string
}

// setupTimeout bounds the wait for the lab and its pods.
const setupTimeout = 2 * time.Minute

// Run is `pinlab lab up`: it starts the lab opts asks for, calls opts.Up,
// and returns once ctx ends (nil: stopping by Ctrl-C is its end) or a part
// of the lab fails (exit.Failed, said on Progress), with everything it
// started stopped and its files removed.
func Run(ctx context.Context, opts Options) error {
	if opts.ControlPlane == ControlPlaneKubernetes && kubelab.OnHost() {
		return runOnHost(ctx, opts)
	}
	f, err := open(ctx, opts)
	if err != nil {
		return err
	}
	for _, w := range warnings(f) {
		say(opts.Progress, "warning: %v", w)
	}
	// "stopped" is said once everything is (the control plane's close
	// below is deferred too, and runs first).
	stopped := false
	defer func() {
		if stopped {
			say(opts.Progress, "stopped")
		}
	}()
	u := &up{opts: opts, f: f}
	defer u.close()
	if err := u.start(ctx); err != nil {
		return interrupted(ctx, f, err)
	}
	if opts.Up != nil {
		opts.Up(u.ready())
	}
	var failed error
	select {
	case <-ctx.Done():
		say(opts.Progress, "stopping")
	case <-u.lab.Failed():
		// A part of the lab stopped (kube-proxy, CoreDNS, a control
		// plane process): what the lab serves no longer follows the API,
		// so it stops rather than run on stale rules.
		failed = u.lab.Err()
		say(opts.Progress, "pinlab: lab up: %v\nstopping the lab", failed)
		if u.kube != nil {
			u.kube.KeepLogs() // the error names one
			say(opts.Progress, "(the components' logs are kept in %s; remove it when done)", u.kube.Dir())
		}
	}
	u.close()
	stopped = true
	if failed != nil {
		return exit.Failed // said above, when it happened
	}
	return nil
}

// up is a lab up while it runs: its control API, its control plane on a
// real one, and the lab.
type up struct {
	opts  Options
	f     *scenario.File
	board *labBoard
	api   *controlAPI
	kube  *kubelab.Up
	lab   *lab.Lab
}

// start starts the control API, the control plane on a real one, and the
// lab, in that order (only the holder of the control address writes the
// token file and the kubeconfig beside it).
func (u *up) start(ctx context.Context) (err error) {
	if u.opts.UI {
		u.board = newLabBoard("pinlab lab up: " + u.f.Name)
	}
	var listeners *handedOver
	if u.opts.ControlPlane == ControlPlaneKubernetes {
		if listeners, err = inherit(); err != nil {
			return err
		}
		defer listeners.close() // what the others did not take
	}
	if u.api, err = serveControl(ctx, u.opts, u.board, listeners.takeControl()); err != nil {
		return err
	}
	dns, err := u.opts.DNS.config()
	if err != nil {
		return exit.UsageError(err)
	}
	cfg := lab.Config{Range: u.f.Range(), Logger: u.opts.Logger, DNS: dns}
	cfg.Kubelet.Images, cfg.Kubelet.LoadClient, cfg.Kubelet.XDSServer = u.opts.Images, LoadClient, XDSServer
	if listeners != nil {
		if cfg.API, err = u.startKube(ctx, listeners.takeKube()); err != nil {
			return err
		}
	}
	var watch cache.ResourceEventHandler
	if u.board != nil {
		u.board.configure(&cfg)
		watch = u.board.pods.handlers()
	}
	if u.lab, err = startLab(ctx, u.opts, cfg, u.f, watch); err != nil {
		return err
	}
	u.api.serve(u.lab)
	if u.board != nil {
		u.board.lab.Store(u.lab)
	}
	return nil
}

// startKube starts lab up's real control plane, serving it on kube (the
// listener handed over) and writing its kubeconfig beside the control
// API's token file.
func (u *up) startKube(ctx context.Context, kube net.Listener) (*lab.API, error) {
	dir, err := filesDir(u.opts, u.api.srv.Addr())
	if err != nil {
		kube.Close()
		return nil, err
	}
	path := filepath.Join(dir, "kubeconfig-"+u.api.port())
	if u.kube, err = kubelab.StartUp(ctx, kubelab.UpConfig{Listener: kube, Kubeconfig: path, Progress: u.opts.Progress,
		PodNetwork: kubelab.PodNetwork(u.opts.PodNetwork)}); err != nil {
		return nil, err
	}
	return u.kube.API(lab.Dataplane(u.opts.Dataplane))
}

// close stops what start started, the API first (503, then refused), so
// that nothing changes the lab while it closes; the dashboard's streams
// end before it. Closing again does nothing.
func (u *up) close() {
	if u.api != nil {
		u.api.stop()
		u.api = nil
		if u.opts.Stopping != nil && u.lab != nil {
			u.opts.Stopping()
		}
	}
	if u.lab != nil {
		u.lab.Close()
		u.lab = nil
	}
	if u.kube != nil {
		u.kube.Close()
		u.kube = nil
	}
}

// ready describes the lab that is up.
func (u *up) ready() Ready {
	l := u.lab
	r := Ready{
		PodCIDR: l.PodCIDR(), ServiceCIDR: l.ServiceCIDR(), DNS: l.DNSAddr(),
		Dataplane: string(l.Dataplane()), KubeProxyMode: string(l.Dataplane().KubeProxyMode()), DataplaneLogs: l.DataplaneLogs(), Objects: control.Snapshot(l),
		Namespaces: namespaces(u.f), Control: u.api.srv.Addr(), TokenFile: u.api.tokenFile,
	}
	if r.KubeProxyMode != "" {
		r.RealDataplane, r.CoreDNSVersion = true, coredns.Version
	}
	if u.board != nil {
		r.Dashboard = DashboardURL(r.Control, u.api.token)
	}
	if u.kube != nil {
		pn, _ := kubelab.ParsePodNetwork(u.opts.PodNetwork)
		r.Kube = &KubeReady{Version: controlplane.KubernetesVersion, Kubeconfig: u.kube.Kubeconfig(), Kubectl: u.kube.Kubectl(), PodNetwork: string(pn)}
	}
	return r
}

// DashboardURL is the address a user opens: the page, with the token in
// the fragment, which the browser keeps to itself.
func DashboardURL(addr, token string) string { return "http://" + addr + "/#token=" + token }

// interrupted replaces err, a start-up failure, by the interruption that
// caused it once ctx has ended: what was still short then is no failure.
func interrupted(ctx context.Context, f *scenario.File, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("lab up: interrupted while starting the lab from %s; everything it started is stopped", f.Name)
}

// startLab starts a lab and applies f's objects, waiting until every pod
// is ready (but those a probe keeps from it) and the dataplane serves
// them. On error the lab is closed.
func startLab(ctx context.Context, opts Options, cfg lab.Config, f *scenario.File, watch cache.ResourceEventHandler) (*lab.Lab, error) {
	setup, cancel := context.WithTimeout(ctx, setupTimeout)
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
	say(opts.Progress, "starting %s from %s ...", plural(len(objs), "object"), f.Name)
	if err = l.Apply(setup, objs); err != nil {
		err = applyError(f, err)
	} else {
		err = l.WaitReadyExcept(setup, neverReady(f))
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// say writes one line on w, if not nil.
func say(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// errNoObjects is open's error for manifests with nothing to start.
var errNoObjects = errors.New("no objects in it; expected Kubernetes manifests (Namespace, Service, Deployment, StatefulSet, EndpointSlice)")
