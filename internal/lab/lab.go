// Package lab assembles one mini-cluster: an API (the embedded API and
// controllers of package cluster on loopback, or a real API server, see
// API), the kubelet running pods as real grpc-go servers, and a dataplane
// serving ClusterIPs and the cluster DNS (pinlab's own, or the real
// kube-proxy and CoreDNS; see dataplane.go). Several embedded labs can run
// side by side in one process on disjoint address ranges.
package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/kubeletapi"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/pki"
	"github.com/pinlab/pinlab/internal/proxy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

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
	// Under the real kube-proxy the lab runs no Proxier
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
	// KubeletCA, if set, is the cluster CA (controlplane.ControlPlane's
	// KubeletCA): the node then serves the kubelet API (package
	// kubeletapi: logs and port-forward, authenticated and authorized
	// through the API server) on NodeIP(PodCIDR), port kubeletapi.Port,
	// with a serving certificate it signs, and the Node reports that port.
	KubeletCA *pki.CA
	// PodNetwork, if set, gives each pod its own network namespace (see
	// kubelet.Config.PodNetwork); its range must be PodCIDR, with NodeIP
	// and DNSPodIP kept local. The lab does not close it.
	PodNetwork kubelet.PodNetwork
	// REST, if set, is the API server as the node's pods reach it, its
	// address and CA without credentials (rest.AnonymousClientConfig):
	// the node's in-process containers of the image's xDS control plane
	// get in-cluster credentials with them and their pod's
	// service-account token (kubelet.Config.APIServer). Nil: they get
	// none.
	REST *rest.Config
	// ControlPlane, if set, is watched while the lab runs: its exit (a
	// controlplane.ControlPlane's Done: etcd, kube-apiserver,
	// kube-controller-manager or kube-scheduler exited) fails the lab
	// (Lab.Failed). The lab does not stop it.
	ControlPlane Component
}

// Lab is a running mini-cluster.
type Lab struct {
	// Cluster is the lab's API: the embedded one, or a client of the real
	// API server (Config.API), with the informers every component reads.
	Cluster *cluster.Cluster
	// Kubelet runs the lab's pods.
	Kubelet *kubelet.Kubelet

	dp dataplane // chosen once, in Start (newDataplane)
	// kubeletAPI serves the kubelet API on a real control plane with a
	// cluster CA (API.KubeletCA); nil otherwise.
	kubeletAPI *kubeletapi.Server
	dpName     Dataplane
	logger     *slog.Logger
	nodeIP     netip.Addr
	nodeName   string
	podNet     kubelet.PodNetwork // per-pod namespaces (API.PodNetwork), nil when pods share the node's
	cancel     context.CancelFunc
	runCtx     context.Context // ends when the lab stops
	wg         sync.WaitGroup
	errs       chan error
	lock       net.Listener

	// failed ends, with the failure as its cause, when a component fails
	// while the lab runs (not while it closes).
	failed  context.Context
	failure context.CancelCauseFunc
	closing atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// Start builds and starts a lab; it returns once the API caches have synced
// and the dataplane serves (the cluster DNS answers). Close stops it.
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

func start(ctx context.Context, cfg Config, index int) (*Lab, error) {
	cfg = withDefaults(cfg)
	c, err := cluster.New(cluster.Config{
		PodCIDR:     netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(244 + index), 0, 0}), 16),
		ServiceCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(96 + index), 0, 0}), 16),
		Seed:        cfg.Seed,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	return run(ctx, cfg, c, cluster.NewControllers(c), c.DNSIP())
}

// withDefaults fills in Config's zero Seed (random) and Logger (discard).
func withDefaults(cfg Config) Config {
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// startOnAPI starts a lab whose API is cfg.API's server: the kubelet
// registers a Node at NodeIP(PodCIDR); under the real kube-proxy the
// cluster DNS (CoreDNS) listens at DNSPodIP(PodCIDR).
func startOnAPI(ctx context.Context, cfg Config) (*Lab, error) {
	cfg = withDefaults(cfg)
	a := cfg.API
	if a.Client == nil || !a.PodCIDR.IsValid() || !a.ServiceCIDR.IsValid() {
		return nil, errors.New("lab: API needs a Client, a PodCIDR and a ServiceCIDR")
	}
	if _, err := ParseDataplane(string(a.Dataplane)); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	node := NodeIP(a.PodCIDR)
	if !node.IsValid() {
		return nil, fmt.Errorf("lab: pod range %v: want an IPv4 range of at least 4 addresses", a.PodCIDR)
	}
	c, err := cluster.Connect(ctx, a.Client, cluster.Config{PodCIDR: a.PodCIDR, ServiceCIDR: a.ServiceCIDR, Seed: cfg.Seed, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if err := c.PodIPs().Reserve(node); err != nil {
		return nil, err
	}
	cfg.Kubelet.Register, cfg.Kubelet.NodeIP = true, node
	if cfg.Kubelet.APIServer == nil {
		cfg.Kubelet.APIServer = a.REST
	}
	if a.KubeletCA != nil {
		cfg.Kubelet.APIPort = kubeletapi.Port
	}
	dnsIP := c.DNSIP()
	if a.Dataplane.KubeProxyMode() != "" {
		// Under the real kube-proxy the kernel drops new connections to
		// Service addresses it does not DNAT: CoreDNS listens on a pod
		// address, published as kube-dns's endpoint.
		dnsIP = DNSPodIP(a.PodCIDR)
		if err := c.PodIPs().Reserve(dnsIP); err != nil {
			return nil, err
		}
	}
	if a.PodNetwork != nil {
		cfg.Kubelet.PodNetwork = a.PodNetwork
		// The node keeps NodeRange local: no pod or client gets it.
		r := NodeRange(a.PodCIDR)
		for ip := r.Addr(); r.Contains(ip); ip = ip.Next() {
			c.PodIPs().Reserve(ip) // NodeIP, DNSPodIP and the range's ends fail: fine
		}
	}
	return run(ctx, cfg, c, nil, dnsIP)
}

// run starts the lab's components on c, with ctrls (nil on a real control
// plane), its cluster DNS at dnsIP: the informers, the controllers, the
// kubelet and the dataplane.
func run(ctx context.Context, cfg Config, c *cluster.Cluster, ctrls *cluster.Controllers, dnsIP netip.Addr) (*Lab, error) {
	port := 53
	if cfg.DNSPort != 0 {
		port = cfg.DNSPort
	}
	dp, dpName, err := newDataplane(cfg, c, netip.AddrPortFrom(dnsIP, uint16(port)))
	if err != nil {
		return nil, err
	}
	kc := kubeletConfig(cfg, c)
	runCtx, cancel := context.WithCancel(context.Background())
	failed, failure := context.WithCancelCause(context.Background())
	l := &Lab{
		Cluster:  c,
		Kubelet:  kubelet.New(c.Client(), c.Factory(), kc),
		dp:       dp,
		dpName:   dpName,
		logger:   cfg.Logger,
		nodeIP:   kc.NodeIP,
		nodeName: kc.NodeName,
		podNet:   kc.PodNetwork,
		errs:     make(chan error, 8),
		cancel:   cancel,
		runCtx:   runCtx,
		failed:   failed,
		failure:  failure,
	}
	if err := l.startInformers(ctx); err != nil {
		l.stop()
		return nil, err
	}
	l.goRun(func() error { return c.Run(runCtx, ctrls) })
	l.goRun(func() error { return l.Kubelet.Run(runCtx) })
	if cfg.API != nil && cfg.API.KubeletCA != nil {
		l.kubeletAPI, err = kubeletapi.Start(ctx, kubeletapi.Config{NodeName: kc.NodeName,
			Addr: netip.AddrPortFrom(kc.NodeIP, kubeletapi.Port), CA: cfg.API.KubeletCA,
			Client: c.Client(), Node: l.Kubelet, Logger: cfg.Logger})
		if err != nil {
			l.stop()
			return nil, err
		}
	}
	if cfg.API != nil && cfg.API.ControlPlane != nil {
		l.watchExit("the control plane", cfg.API.ControlPlane)
	}
	err = l.dp.start(ctx, l)
	if err == nil {
		err = l.publishDNSPort(ctx)
	}
	if err != nil {
		l.dp.stop(context.Background())
		l.stop()
		return nil, err
	}
	return l, nil
}

// startInformers starts the informers the lab reads itself (kubeapi's
// waits, WaitReady; on the embedded API the controllers register them too,
// on a real one nothing else would) and those its components registered,
// and waits until their caches have synced.
func (l *Lab) startInformers(ctx context.Context) error {
	f := l.Cluster.Factory()
	l.api().AddInformers()
	f.Start(l.runCtx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("lab: %v cache did not sync: %w", typ, ctx.Err())
		}
	}
	return nil
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
	if l.kubeletAPI != nil {
		l.kubeletAPI.Close()
	}
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
	dnsErr := l.dp.stop(ctx)
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

// DNSAddr returns the cluster DNS address ("IP:port"): pinlab's DNS's, or
// CoreDNS's under the real kube-proxy.
func (l *Lab) DNSAddr() string { return l.dp.dnsAddr() }

// SyncDNSLog returns once every answer the cluster DNS sent before the
// call has reached Config.DNS.QueryLog: at once for pinlab's DNS (it logs
// as it answers); for CoreDNS, whose answers come through dnstap up to a
// second late, when a marker query's message has come through.
func (l *Lab) SyncDNSLog(ctx context.Context) error { return l.dp.syncQueryLog(ctx) }

// Dataplane returns what serves the lab's ClusterIPs and cluster DNS.
func (l *Lab) Dataplane() Dataplane { return l.dpName }

// DataplaneLogs names the log file of each process of the lab's dataplane
// by component ("kube-proxy", "CoreDNS"); empty for pinlab's, which runs
// in this process.
func (l *Lab) DataplaneLogs() map[string]string { return l.dp.logs() }

// kubeletConfig is cfg.Kubelet with the lab's parts and defaults: c's pod
// addresses, kube-dns's ClusterIP as the cluster DNS (kubeadm's
// --cluster-dns), the host's loopback as the node's address.
func kubeletConfig(cfg Config, c *cluster.Cluster) kubelet.Config {
	kc := cfg.Kubelet
	kc.PodIPs, kc.Logger = c.PodIPs(), cfg.Logger
	if !kc.ClusterDNS.IsValid() {
		kc.ClusterDNS = c.DNSIP()
	}
	if !kc.NodeIP.IsValid() {
		kc.NodeIP = netip.MustParseAddr("127.0.0.1")
	}
	if kc.NodeName == "" {
		kc.NodeName = DefaultNodeName
	}
	return kc
}
