// Package lab assembles one mini-cluster on loopback: the in-memory API and
// controllers (package cluster), the kubelet running pods as real grpc-go
// servers, kube-proxy serving ClusterIP VIPs, and the cluster DNS. Several
// labs can run side by side in one process on disjoint address ranges.
package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/endpoints"
	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/proxy"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Ranges is the number of address ranges, so the most labs that can run at
// once on one machine.
const Ranges = 12

// lockPort is the port a lab binds on its DNS address to claim its range
// against every other lab on the machine, in this process or another.
const lockPort = 10053

// Config configures a lab. The zero value is a lab on the first free address
// range with default components.
type Config struct {
	// Waiting, if not nil, is called once when Start has to wait because
	// every address range is in use.
	Waiting func()
	// Range selects the lab's addresses: range r (1 to Ranges) has pods in
	// 127.(243+r).0.0/16, Services in 127.(95+r).0.0/16 and the cluster DNS
	// at 127.(95+r).0.10:53. A lab claims its range machine-wide for its
	// lifetime (a listener on 127.(95+r).0.10:10053). Zero picks the first
	// free range; a range in use is an error.
	Range int
	// Seed seeds names, ClusterIPs, kube-proxy picks and DNS shuffles; 0
	// means random. It overrides the components' own seeds.
	Seed uint64
	// DNS configures the cluster DNS (TTL, FixedOrder, Pods, QueryLog; see
	// clusterdns.Config). The lab sets Addr (its range's DNS IP, port 53),
	// Rand and Logger. Under the real kube-proxy (API.Dataplane) the same
	// settings configure the real CoreDNS instead (see API.CoreDNS).
	DNS clusterdns.Config
	// DNSPort overrides port 53 (0 keeps 53; pinlab's DNS falls back to a
	// free port if 53 cannot be bound, CoreDNS fails to start). The
	// kube-dns Service's ports follow the port actually bound.
	DNSPort int
	// Proxy configures kube-proxy (Mode, OnConn, DialTimeout; see
	// proxy.Config). The lab sets Seed and Logger.
	Proxy proxy.Config
	// Kubelet configures the kubelet (Observe, Events, DeadAddress,
	// RestartBackoff; see kubelet.Config). The lab sets PodIPs and Logger.
	Kubelet kubelet.Config
	// Logger receives component logs; nil discards them.
	Logger *slog.Logger
	// API, if not nil, runs the lab on a real control plane instead of the
	// embedded API and controllers; see API. Range is then ignored.
	API *API

	dnsIP netip.Addr // the DNS's address when not the kube-dns ClusterIP
}

// API is a real Kubernetes API server for a lab (package controlplane
// starts one in a private network namespace). The lab runs no controllers
// of its own there: kube-controller-manager and kube-scheduler do their
// work. Its kubelet registers the Node NodeName and runs the pods bound to
// it; kube-proxy and the cluster DNS watch the API server.
type API struct {
	// Client talks to the API server, with rights to create Nodes, Leases,
	// Services and pod status (system:masters in the lab).
	Client kubernetes.Interface
	// PodCIDR and ServiceCIDR are the API server's ranges (the pod
	// addresses the kubelet hands out and --service-cluster-ip-range);
	// both must be local addresses of this network namespace, and neither
	// may be loopback (the API server refuses loopback endpoints). The
	// node's address is the last but one of PodCIDR; the kube-dns
	// ClusterIP is the tenth address of ServiceCIDR.
	PodCIDR, ServiceCIDR netip.Prefix
	// Dataplane chooses what serves ClusterIPs: "" or DataplanePinlab for
	// pinlab's kube-proxy emulation (Config.Proxy), or the real kube-proxy
	// in nftables or iptables mode, run by the lab (package kubeproxy) with
	// --hostname-override the kubelet's node and --cluster-cidr PodCIDR.
	// Under the real kube-proxy the lab runs no Proxier (Lab.Proxy is nil)
	// and binds no ClusterIP; Config.Proxy.OnConn then reports the
	// kernel's conntrack entries of the Service range (conntrack -E), and
	// WaitReady reads kube-proxy's rules back from the kernel. Clients must
	// connect to ClusterIPs from pod addresses: kube-proxy marks other
	// sources for masquerade, which fails on lo. The cluster DNS is then
	// the real CoreDNS (package coredns, see CoreDNS), not pinlab's: it
	// listens on DNSPodIP(PodCIDR), port 53 (Config.DNSPort overrides),
	// and the lab publishes that address as kube-dns's EndpointSlice, since
	// the kernel drops new connections to Service addresses kube-proxy
	// does not DNAT.
	Dataplane Dataplane
	// KubeProxy configures the real kube-proxy for a kube-proxy Dataplane:
	// BinDir and Kubeconfig are required (controlplane.ControlPlane's
	// BinDir and KubeProxyKubeconfig), Log and ReadyTimeout optional; the
	// lab sets Mode, NodeName, ClusterCIDR and (if nil) Logger.
	KubeProxy kubeproxy.Config
	// CoreDNS configures the real CoreDNS for a kube-proxy Dataplane: REST
	// is required (the control plane's admin: Start grants CoreDNS
	// kubeadm's RBAC with it), BinDir and Dir optional (Dir holds the
	// Corefile, the log and the dnstap socket; "" is a temporary
	// directory). The lab sets Addr and Logger, and maps Config.DNS onto
	// the Corefile (see coreDNSConfig): TTL, Pods, FixedOrder, Cache and
	// QueryLog; a DNS setting CoreDNS cannot express is an error before
	// anything starts.
	CoreDNS coredns.Config
	// ControlPlane, if set, is watched while the lab runs: its exit (a
	// controlplane.ControlPlane's Done: etcd, kube-apiserver,
	// kube-controller-manager or kube-scheduler exited) fails the lab
	// (Lab.Failed). The lab does not stop it.
	ControlPlane Component
}

// Lab is a running mini-cluster.
type Lab struct {
	Cluster *cluster.Cluster
	// DNS is pinlab's cluster DNS; nil under the real kube-proxy
	// (API.Dataplane), where CoreDNS answers. DNSAddr is the DNS's
	// address either way.
	DNS *clusterdns.Server
	// CoreDNS is the real CoreDNS under the real kube-proxy; nil
	// otherwise.
	CoreDNS *coredns.Server
	// Proxy is pinlab's kube-proxy emulation; nil under the real
	// kube-proxy (API.Dataplane).
	Proxy   *proxy.Proxier
	Kubelet *kubelet.Kubelet

	real   *realDataplane // the real kube-proxy, if API.Dataplane asks for it
	logger *slog.Logger
	nodeIP netip.Addr
	cancel context.CancelFunc
	runCtx context.Context // ends when the lab stops
	wg     sync.WaitGroup
	errs   chan error
	lock   net.Listener

	// failed ends, with the failure as its cause, when a component fails
	// while the lab runs (not while it closes).
	failed  context.Context
	failure context.CancelCauseFunc
	closing atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// Start builds and starts a lab; it returns once the API caches have synced
// and the DNS server is serving. Close stops it.
func Start(ctx context.Context, cfg Config) (*Lab, error) {
	if cfg.API != nil {
		return startOnAPI(ctx, cfg)
	}
	lock, index, err := claimRange(ctx, cfg.Range, cfg.Waiting)
	if err != nil {
		return nil, err
	}
	l, err := start(ctx, cfg, index)
	if err != nil {
		lock.Close()
		return nil, err
	}
	l.lock = lock
	return l, nil
}

// claimRange binds the lock address of range r and returns the listener
// and the 0-based index. With r zero it takes the first free range, waiting
// (until ctx ends) while every range is in use by other labs.
func claimRange(ctx context.Context, r int, waiting func()) (net.Listener, int, error) {
	if r < 0 || r > Ranges {
		return nil, 0, fmt.Errorf("lab: range %d: want 1 to %d, or 0 for the first free one", r, Ranges)
	}
	if r > 0 {
		ln, err := loopback.Listen(ctx, lockAddr(r-1))
		if err != nil {
			return nil, 0, fmt.Errorf("lab: address range %d is in use by another lab: %w", r, err)
		}
		return ln, r - 1, nil
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		for i := range Ranges {
			if ln, err := loopback.Listen(ctx, lockAddr(i)); err == nil {
				return ln, i, nil
			}
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("lab: all %d address ranges stayed in use by other labs on this machine: %w", Ranges, ctx.Err())
		case <-t.C:
		}
	}
}

func lockAddr(i int) string {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(96 + i), 0, 10}), lockPort).String()
}

func start(ctx context.Context, cfg Config, index int) (*Lab, error) {
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := cluster.New(cluster.Config{
		PodCIDR:     netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(244 + index), 0, 0}), 16),
		ServiceCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(96 + index), 0, 0}), 16),
		Seed:        cfg.Seed,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	return run(ctx, cfg, c, cluster.NewControllers(c))
}

// startOnAPI starts a lab whose API is cfg.API's server.
func startOnAPI(ctx context.Context, cfg Config) (*Lab, error) {
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := cfg.API
	if a.Client == nil || !a.PodCIDR.IsValid() || !a.ServiceCIDR.IsValid() {
		return nil, errors.New("lab: API needs a Client, a PodCIDR and a ServiceCIDR")
	}
	c, err := cluster.Connect(ctx, a.Client, cluster.Config{PodCIDR: a.PodCIDR, ServiceCIDR: a.ServiceCIDR, Seed: cfg.Seed, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	node := NodeIP(a.PodCIDR)
	if !node.IsValid() {
		return nil, fmt.Errorf("lab: pod range %v: want an IPv4 range of at least 4 addresses", a.PodCIDR)
	}
	if err := c.PodIPs().Reserve(node); err != nil {
		return nil, err
	}
	cfg.Kubelet.Register, cfg.Kubelet.NodeIP = true, node
	if _, err := ParseDataplane(string(a.Dataplane)); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if a.Dataplane.KubeProxyMode() == "" {
		return run(ctx, cfg, c, nil)
	}
	if err := checkRealDataplane(cfg); err != nil {
		return nil, err
	}
	dnsIP := DNSPodIP(a.PodCIDR)
	if err := c.PodIPs().Reserve(dnsIP); err != nil {
		return nil, err
	}
	cfg.dnsIP = dnsIP
	return run(ctx, cfg, c, nil)
}

// checkRealDataplane checks a real kube-proxy Dataplane's configuration
// and tools before anything starts.
func checkRealDataplane(cfg Config) error {
	a := cfg.API
	if _, err := ParseDataplane(string(a.Dataplane)); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	// iptables and nftables pick alike (uniformly at random per new
	// connection; see proxy.ModeNFTables), so a plan's iptables or
	// nftables runs on either real mode; ipvs's round robin would not.
	if m := cfg.Proxy.Mode; m == proxy.ModeIPVS {
		return fmt.Errorf("lab: proxy mode %s asked for, but the dataplane is the real kube-proxy in %s mode", m, a.Dataplane.KubeProxyMode())
	}
	if a.KubeProxy.BinDir == "" || a.KubeProxy.Kubeconfig == "" {
		return fmt.Errorf("lab: dataplane %s needs API.KubeProxy.BinDir and Kubeconfig", a.Dataplane)
	}
	if a.CoreDNS.REST == nil {
		return fmt.Errorf("lab: dataplane %s needs API.CoreDNS.REST (the cluster DNS is CoreDNS)", a.Dataplane)
	}
	if _, err := coreDNSConfig(cfg); err != nil {
		return err
	}
	if err := a.Dataplane.Check(); err != nil {
		return fmt.Errorf("lab: dataplane %s: %w", a.Dataplane, err)
	}
	return nil
}

// NodeIP is the node's address on a real control plane: the last but one
// address of the pod range (10.244.255.254 in 10.244.0.0/16), to be the
// API server's advertised address too. It is the zero Addr for a range
// that is not IPv4 or holds fewer than 4 addresses.
func NodeIP(pods netip.Prefix) netip.Addr {
	p := pods.Masked()
	if !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Addr{}
	}
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= 1<<(32-p.Bits()) - 2
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// run starts the lab's components on c, with ctrls (nil on a real control
// plane).
func run(ctx context.Context, cfg Config, c *cluster.Cluster, ctrls *cluster.Controllers) (*Lab, error) {
	port := 53
	if cfg.DNSPort != 0 {
		port = cfg.DNSPort
	}
	dc := cfg.DNS
	dnsIP := c.DNSIP()
	if cfg.dnsIP.IsValid() {
		dnsIP = cfg.dnsIP
	}
	realDP := cfg.API != nil && cfg.API.Dataplane.KubeProxyMode() != ""
	var dns *clusterdns.Server
	if !realDP {
		dc.Addr, dc.Rand, dc.Logger = netip.AddrPortFrom(dnsIP, uint16(port)).String(), rand.New(rand.NewPCG(cfg.Seed, 2)), cfg.Logger
		var err error
		if dns, err = clusterdns.New(c.Factory(), dc); err != nil {
			return nil, err
		}
	}
	pc, kc := cfg.Proxy, cfg.Kubelet
	pc.Seed, pc.Logger = cfg.Seed+1, cfg.Logger
	kc.PodIPs, kc.Logger = c.PodIPs(), cfg.Logger
	if !kc.NodeIP.IsValid() {
		kc.NodeIP = netip.MustParseAddr("127.0.0.1") // the node is the host's loopback
	}
	if kc.NodeName == "" {
		kc.NodeName = DefaultNodeName
	}
	runCtx, cancel := context.WithCancel(context.Background())
	failed, failure := context.WithCancelCause(context.Background())
	l := &Lab{
		Cluster: c,
		DNS:     dns,
		Kubelet: kubelet.New(c.Client(), c.Factory(), kc),
		logger:  cfg.Logger,
		nodeIP:  kc.NodeIP,
		errs:    make(chan error, 8),
		cancel:  cancel,
		runCtx:  runCtx,
		failed:  failed,
		failure: failure,
	}
	if !realDP {
		l.Proxy = proxy.New(c.Factory(), pc)
	}
	// The informers the lab itself reads (waitCached, WaitReady); on the
	// embedded API the controllers register them too, on a real one nothing
	// else would.
	f := c.Factory()
	for _, inf := range []cache.SharedIndexInformer{
		f.Core().V1().Namespaces().Informer(), f.Core().V1().Services().Informer(), f.Core().V1().Pods().Informer(),
		f.Apps().V1().Deployments().Informer(), f.Apps().V1().StatefulSets().Informer(), f.Discovery().V1().EndpointSlices().Informer(),
	} {
		_ = inf
	}
	f.Start(runCtx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			l.stop()
			return nil, fmt.Errorf("lab: %v cache did not sync: %w", typ, ctx.Err())
		}
	}
	if err := l.startDNS(ctx, cfg, netip.AddrPortFrom(dnsIP, uint16(port))); err != nil {
		l.stop()
		return nil, err
	}
	if err := l.publishDNSPort(ctx); err != nil {
		l.stopDNS(context.Background())
		l.stop()
		return nil, err
	}
	l.goRun(func() error { return c.Run(runCtx, ctrls) })
	if l.Proxy != nil {
		l.goRun(func() error { return l.Proxy.Run(runCtx) })
	}
	l.goRun(func() error { return l.Kubelet.Run(runCtx) })
	if cfg.API != nil && cfg.API.ControlPlane != nil {
		l.watchExit("the control plane", cfg.API.ControlPlane)
	}
	if realDP {
		err := l.publishDNSEndpoints(ctx)
		if err == nil {
			err = l.startKubeProxy(ctx, cfg.API, kc.NodeName, pc.OnConn)
		}
		if err != nil {
			l.stopDNS(context.Background())
			l.stop()
			return nil, err
		}
	}
	return l, nil
}

// startDNS starts the cluster DNS at addr: pinlab's server, or under the
// real kube-proxy the real CoreDNS.
func (l *Lab) startDNS(ctx context.Context, cfg Config, addr netip.AddrPort) error {
	if l.DNS != nil {
		return l.DNS.Start(ctx)
	}
	cc, err := coreDNSConfig(cfg)
	if err != nil {
		return err
	}
	cc.Addr = addr
	if cc.Logger == nil {
		cc.Logger = l.logger
	}
	if l.CoreDNS, err = coredns.Start(ctx, cc); err != nil {
		return fmt.Errorf("lab: cluster DNS: %w", err)
	}
	l.watchExit("CoreDNS", l.CoreDNS)
	return nil
}

// stopDNS stops the cluster DNS, whichever runs.
func (l *Lab) stopDNS(ctx context.Context) error {
	if l.CoreDNS != nil {
		return l.CoreDNS.Close()
	}
	return l.DNS.Shutdown(ctx)
}

// DefaultNodeName is the kubelet's node name when Config.Kubelet.NodeName
// is empty.
const DefaultNodeName = "pinlab-node"

// goRun runs a component's goroutine until it returns; its error is
// Close's, and, when the lab is not closing, the lab's failure (Failed).
func (l *Lab) goRun(f func() error) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if err := f(); err != nil {
			l.fail(err)
			l.errs <- err
		}
	}()
}

// fail records err as the lab's failure, unless the lab is closing or
// already failed.
func (l *Lab) fail(err error) {
	if l.closing.Load() || l.runCtx.Err() != nil {
		return
	}
	l.failure(err) // the first cause stays
}

// Failed is closed when a part of the lab stops while the lab runs: a
// component's goroutine returned an error, or, on a real control plane
// (Config.API), kube-proxy, CoreDNS or a control plane process
// (API.ControlPlane) exited. The lab then no longer does what it reports
// (kube-proxy's rules, for one, stay as they were), so callers stop; Err
// says what failed. Never closed by Close.
func (l *Lab) Failed() <-chan struct{} { return l.failed.Done() }

// Err returns the failure Failed announced, nil before it.
func (l *Lab) Err() error { return context.Cause(l.failed) }

// watchExit makes c's exit, while the lab runs, a failure of the lab
// (what: the component's name).
func (l *Lab) watchExit(what string, c Component) {
	l.goRun(func() error {
		select {
		case <-l.runCtx.Done():
			return nil
		case <-c.Done():
			if l.closing.Load() {
				return nil
			}
			err := c.Err()
			if err == nil {
				err = errors.New("exited")
			}
			return fmt.Errorf("lab: %s stopped while the lab ran: %w", what, err)
		}
	})
}

// Component is a process the lab depends on but does not own the exit of
// (the control plane's, CoreDNS): Done is closed when it exits, Err then
// says why.
type Component interface {
	Done() <-chan struct{}
	Err() error
}

// stop cancels the components and waits for them and the informers.
func (l *Lab) stop() {
	l.cancel()
	l.wg.Wait()
	l.Cluster.Factory().Shutdown()
}

// Close stops every component (pods stop at once) and waits for their
// goroutines; it returns the errors components reported. Closing again
// returns the same result.
func (l *Lab) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.close() })
	return l.closeErr
}

func (l *Lab) close() error {
	l.closing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dnsErr := l.stopDNS(ctx)
	l.stop()
	close(l.errs)
	var errs []error
	for err := range l.errs {
		errs = append(errs, err)
	}
	if l.lock != nil {
		l.lock.Close()
	}
	return errors.Join(append(errs, dnsErr)...)
}

// publishDNSPort sets the ports of the kube-dns Service to the port the
// DNS server bound, when that is not 53 (Config.DNSPort, or a fallback
// because 53 needs root or was taken), and waits until the informers see
// it. Its SRV records (_dns._udp.kube-dns.kube-system.svc) and `lab get
// svc` then name the port that answers, as a kube-dns Service's ports name
// the port CoreDNS serves on.
func (l *Lab) publishDNSPort(ctx context.Context) error {
	ap, err := netip.ParseAddrPort(l.DNSAddr())
	if err != nil {
		return fmt.Errorf("lab: DNS address: %w", err)
	}
	port := int32(ap.Port())
	ref := clusterdns.DefaultDNSService
	svcs := l.Cluster.Client().CoreV1().Services(ref.Namespace)
	svc, err := svcs.Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("lab: DNS Service: %w", err)
	}
	changed := false
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Port != port || p.TargetPort != intstr.FromInt32(port) {
			p.Port, p.TargetPort, changed = port, intstr.FromInt32(port), true
		}
	}
	if !changed {
		return nil
	}
	if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("lab: DNS Service port %d: %w", port, err)
	}
	lister := l.Cluster.Factory().Core().V1().Services().Lister()
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		s, err := lister.Services(ref.Namespace).Get(ref.Name)
		return err == nil && len(s.Spec.Ports) > 0 && s.Spec.Ports[0].Port == port, nil
	})
}

// DNSAddr returns the cluster DNS address ("IP:port"), pinlab's DNS's or
// CoreDNS's.
func (l *Lab) DNSAddr() string {
	if l.CoreDNS != nil {
		return l.CoreDNS.Addr().String()
	}
	return l.DNS.Addr()
}

// SyncDNSLog returns once every answer the cluster DNS sent before the
// call has reached Config.DNS.QueryLog: at once for pinlab's DNS (it logs
// as it answers); for CoreDNS, whose answers come through dnstap up to a
// second late, when a marker query's message has come through.
func (l *Lab) SyncDNSLog(ctx context.Context) error {
	if l.CoreDNS == nil {
		return nil
	}
	return l.CoreDNS.SyncQueryLog(ctx)
}

// waitCached waits until the informer caches hold every object, so that
// components and waits that read the caches see what was just written.
func (l *Lab) waitCached(ctx context.Context, objs []runtime.Object) error {
	f := l.Cluster.Factory()
	stores := map[string]cache.Store{
		"Namespace":     f.Core().V1().Namespaces().Informer().GetStore(),
		"Service":       f.Core().V1().Services().Informer().GetStore(),
		"Deployment":    f.Apps().V1().Deployments().Informer().GetStore(),
		"StatefulSet":   f.Apps().V1().StatefulSets().Informer().GetStore(),
		"EndpointSlice": f.Discovery().V1().EndpointSlices().Informer().GetStore(),
	}
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, o := range objs {
			m, err := meta.Accessor(o)
			if err != nil {
				return false, err
			}
			key := m.GetName()
			if _, isNS := o.(*corev1.Namespace); !isNS {
				key = ns(m) + "/" + key
			}
			store := stores[fmt.Sprintf("%T", o)[strings.LastIndexByte(fmt.Sprintf("%T", o), '.')+1:]]
			if store == nil {
				continue
			}
			if _, ok, _ := store.GetByKey(key); !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

func ns(o metav1.Object) string {
	if o.GetNamespace() == "" {
		return metav1.NamespaceDefault
	}
	return o.GetNamespace()
}

// Scale sets the spec.replicas of a Deployment or StatefulSet (kind).
func (l *Lab) Scale(ctx context.Context, kind, namespace, name string, replicas int32) error {
	return l.editWorkload(ctx, kind, namespace, name, func(r **int32, _ *corev1.PodTemplateSpec) { *r = &replicas })
}

// UpdateTemplate changes the pod template of a Deployment or StatefulSet
// (kind) with edit, as kubectl set image or edit would; the workload's
// update strategy then rolls the change out.
func (l *Lab) UpdateTemplate(ctx context.Context, kind, namespace, name string, edit func(*corev1.PodTemplateSpec)) error {
	return l.editWorkload(ctx, kind, namespace, name, func(_ **int32, t *corev1.PodTemplateSpec) { edit(t) })
}

// editWorkload reads a Deployment or StatefulSet, lets edit change its
// spec.replicas and pod template, writes it back, and returns once the
// lab's informer cache holds the written generation, so that a WaitReady
// that follows judges the new spec and not the one before it (the cache
// lags the API by a watch event; with the real API server that lag let
// WaitReady return while a scale-out had no new pod yet).
func (l *Lab) editWorkload(ctx context.Context, kind, namespace, name string, edit func(replicas **int32, t *corev1.PodTemplateSpec)) error {
	apps := l.Cluster.Client().AppsV1()
	f := l.Cluster.Factory().Apps().V1()
	var written int64
	var cached func() (metav1.Object, error)
	switch kind {
	case "Deployment":
		d, err := apps.Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&d.Spec.Replicas, &d.Spec.Template)
		if d, err = apps.Deployments(namespace).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return err
		}
		written = d.Generation
		cached = func() (metav1.Object, error) { return f.Deployments().Lister().Deployments(namespace).Get(name) }
	case "StatefulSet":
		s, err := apps.StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&s.Spec.Replicas, &s.Spec.Template)
		if s, err = apps.StatefulSets(namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
		written = s.Generation
		cached = func() (metav1.Object, error) { return f.StatefulSets().Lister().StatefulSets(namespace).Get(name) }
	default:
		return fmt.Errorf("lab: cannot change a %s; expected Deployment or StatefulSet", kind)
	}
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		o, err := cached()
		return err == nil && o.GetGeneration() >= written, nil
	})
}

// WaitReady waits until every Deployment and StatefulSet has all its
// replicas Ready, except those in skip (workloads whose pods are known
// never to turn Ready, such as pods with a readiness probe on a port
// nothing listens on: for those, until their first pod exists), and the
// data plane caught up: every Service's
// EndpointSlices list its ready pods and kube-proxy serves each ClusterIP
// port with exactly those endpoints. The error names what is still short.
func (l *Lab) WaitReady(ctx context.Context, skip ...WorkloadRef) error {
	if err := l.waitDeployments(ctx, skip); err != nil {
		return err
	}
	var short string
	err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		short = l.dataplaneShort()
		return short == "", nil
	})
	if err != nil && short != "" {
		return fmt.Errorf("lab: %s", short)
	}
	return err
}

// dataplaneShort describes the first Service whose slices do not match its
// ready pods, or whose VIP rules do not match its slices (hand-written ones
// included); "" when all match.
func (l *Lab) dataplaneShort() string {
	f := l.Cluster.Factory()
	svcs, _ := f.Core().V1().Services().Lister().List(labels.Everything())
	var served map[netip.AddrPort]servedVIP
	for _, s := range svcs {
		slices, _ := f.Discovery().V1().EndpointSlices().Lister().EndpointSlices(s.Namespace).List(
			labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Name}))
		want := 0
		if len(s.Spec.Selector) > 0 {
			pods, _ := f.Core().V1().Pods().Lister().Pods(s.Namespace).List(labels.SelectorFromSet(s.Spec.Selector))
			for _, p := range pods {
				if cluster.IsPodReady(p) && p.DeletionTimestamp == nil {
					want++
				}
			}
			got := 0
			for _, es := range slices {
				if es.Labels[discoveryv1.LabelManagedBy] != cluster.ManagedBy {
					continue // hand-written: the API takes them, kube-proxy uses them
				}
				for _, ep := range es.Endpoints {
					if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
						got++
					}
				}
			}
			if got != want {
				return fmt.Sprintf("Service %s/%s: EndpointSlices list %d ready endpoints, %d pods are ready", s.Namespace, s.Name, got, want)
			}
		}
		// A Service without a selector (the l7-proxy gateway's, the API
		// server's kubernetes Service) has only hand-written slices: no
		// pod count to match, but kube-proxy must still serve what they
		// list before traffic starts.
		if s.Spec.ClusterIP == corev1.ClusterIPNone || s.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			vip := netip.AddrPortFrom(netip.MustParseAddr(s.Spec.ClusterIP), uint16(sp.Port))
			if served == nil {
				var err error
				if served, err = l.served(); err != nil {
					return err.Error()
				}
			}
			n, listening := served[vip].endpoints, served[vip].accepting
			// What kube-proxy makes of every slice of the Service: the
			// controller's, now matching the ready pods, and any
			// hand-written one.
			eps, _ := endpoints.Filter{Port: sp.Name}.Endpoints(slices)
			if e := len(endpoints.Eligible(eps)); n != e || listening != (e > 0) {
				msg := fmt.Sprintf("Service %s/%s: kube-proxy serves %v with %d endpoints, its EndpointSlices have %d", s.Namespace, s.Name, vip, n, e)
				if len(s.Spec.Selector) > 0 {
					msg += fmt.Sprintf(" (%d pods are ready)", want)
				}
				return msg
			}
		}
	}
	return ""
}

// waitDeployments waits until every Deployment and StatefulSet has all its
// replicas Ready, failing fast when a pod can never run.
// WorkloadRef names a Deployment or StatefulSet, for WaitReady.
type WorkloadRef struct {
	Kind, Namespace, Name string // Kind is "Deployment" or "StatefulSet"
}

func (l *Lab) waitDeployments(ctx context.Context, skip []WorkloadRef) error {
	f := l.Cluster.Factory()
	var short string
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		ds, err := f.Apps().V1().Deployments().Lister().List(labels.Everything())
		if err != nil {
			return false, err
		}
		ss, err := f.Apps().V1().StatefulSets().Lister().List(labels.Everything())
		if err != nil {
			return false, err
		}
		var ws []podOwner
		for _, d := range ds {
			ws = append(ws, podOwner{"Deployment", d.ObjectMeta, d.Spec.Selector, *d.Spec.Replicas,
				d.Status.ObservedGeneration, d.Status.Replicas, d.Status.ReadyReplicas})
		}
		for _, s := range ss {
			ws = append(ws, podOwner{"StatefulSet", s.ObjectMeta, s.Spec.Selector, *s.Spec.Replicas,
				s.Status.ObservedGeneration, s.Status.Replicas, s.Status.ReadyReplicas})
		}
		for _, w := range ws {
			if slices.Contains(skip, WorkloadRef{w.kind, w.Namespace, w.Name}) {
				if w.observed < w.Generation || w.want > 0 && w.have == 0 {
					short = fmt.Sprintf("%s %s/%s: no pod created yet", w.kind, w.Namespace, w.Name)
					return false, nil
				}
				continue // created; its pods are not expected to turn Ready
			}
			if w.observed < w.Generation || w.ready != w.want || w.have != w.want {
				problem, fatal := l.podProblem(w.Namespace, w.selector)
				short = fmt.Sprintf("%s %s/%s: %d of %d pods ready%s", w.kind, w.Namespace, w.Name, w.ready, w.want, problem)
				if fatal {
					return false, fmt.Errorf("lab: %s", short)
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && short != "" && ctx.Err() != nil {
		return fmt.Errorf("lab: %s", short)
	}
	return err
}

// podOwner is what waitDeployments reads of a Deployment or StatefulSet.
type podOwner struct {
	kind string
	metav1.ObjectMeta
	selector    *metav1.LabelSelector
	want        int32
	observed    int64
	have, ready int32
}

// permanent lists the waiting reasons the kubelet never recovers from.
var permanent = map[string]bool{"CreateContainerConfigError": true, "FailedCreatePodSandBox": true}

// podProblem describes why the first unready pod a selector picks is not
// ready, and whether it never will be.
func (l *Lab) podProblem(namespace string, selector *metav1.LabelSelector) (string, bool) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return "", false
	}
	pods, _ := l.Cluster.Factory().Core().V1().Pods().Lister().Pods(namespace).List(sel)
	for _, p := range pods {
		if cluster.IsPodReady(p) {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Message != "" {
				return fmt.Sprintf(" (pod %s: %s: %s)", p.Name, w.Reason, w.Message), permanent[w.Reason]
			}
		}
		if p.Status.Message != "" {
			return fmt.Sprintf(" (pod %s: %s)", p.Name, p.Status.Message), false
		}
	}
	return "", false
}
