package lab

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/conntrack"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/proxy"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kernelDataplane is the real dataplane (DataplaneKubeProxyNFTables or
// DataplaneKubeProxyIPTables), on a real control plane only: the real
// kube-proxy (package kubeproxy) programs the kernel of the lab's network
// namespace, the real CoreDNS (package coredns) answers the cluster DNS,
// and conntrack -E reports the connections the kernel DNATs, as pinlab's
// Proxier reports its relays (Config.Proxy.OnConn). WaitReady reads
// kube-proxy's rules back from the kernel.
type kernelDataplane struct {
	api    *API
	dns    coredns.Config // Addr set
	onConn func(proxy.Conn, proxy.ConnEvent)

	coreDNS *coredns.Server
	kp      *kubeproxy.KubeProxy

	mu      sync.Mutex // guards the rules cache
	rules   []kubeproxy.Rule
	readAt  time.Time
	readErr error
}

// newKernelDataplane checks cfg.API's real dataplane and tools, before
// anything starts, and builds it with CoreDNS at addr.
func newKernelDataplane(cfg Config, addr netip.AddrPort) (*kernelDataplane, error) {
	if err := checkKernelDataplane(cfg); err != nil {
		return nil, err
	}
	cc, err := coreDNSConfig(cfg)
	if err != nil {
		return nil, err
	}
	cc.Addr = addr
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	return &kernelDataplane{api: cfg.API, dns: cc, onConn: cfg.Proxy.OnConn}, nil
}

// checkKernelDataplane checks a real kube-proxy Dataplane's configuration
// and tools before anything starts.
func checkKernelDataplane(cfg Config) error {
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

// start starts CoreDNS, publishes its address as kube-dns's endpoint,
// then, once the kubelet's Node is registered, starts kube-proxy and
// conntrack's watch.
func (d *kernelDataplane) start(ctx context.Context, l *Lab) error {
	var err error
	if d.coreDNS, err = coredns.Start(ctx, d.dns); err != nil {
		return fmt.Errorf("lab: cluster DNS: %w", err)
	}
	l.watchExit("CoreDNS", d.coreDNS)
	if err := d.publishDNSEndpoints(ctx, l); err != nil {
		return err
	}
	return d.startKubeProxy(ctx, l)
}

func (d *kernelDataplane) dnsAddr() string {
	if d.coreDNS == nil {
		return d.dns.Addr.String()
	}
	return d.coreDNS.Addr().String()
}

// syncQueryLog waits for a marker query's dnstap message: CoreDNS's
// answers come through dnstap up to a second late.
func (d *kernelDataplane) syncQueryLog(ctx context.Context) error {
	return d.coreDNS.SyncQueryLog(ctx)
}

// stop stops CoreDNS; kube-proxy stops with the lab's run context.
func (d *kernelDataplane) stop(context.Context) error {
	if d.coreDNS == nil {
		return nil
	}
	return d.coreDNS.Close()
}

func (d *kernelDataplane) logs() map[string]string {
	out := map[string]string{}
	if d.kp != nil {
		out["kube-proxy"] = d.kp.Log()
	}
	if d.coreDNS != nil {
		out["CoreDNS"] = d.coreDNS.Log()
	}
	return out
}

// rulesMaxAge bounds how often served reads the kernel's rules (WaitReady
// polls every 10 ms; a read execs nft or iptables-save).
const rulesMaxAge = 100 * time.Millisecond

// served reads kube-proxy's rules back from the kernel (again when older
// than rulesMaxAge): the kernel accepts a ClusterIP port's new
// connections when its rules DNAT them to some endpoint.
func (d *kernelDataplane) served() (map[netip.AddrPort]servedVIP, error) {
	rules, err := d.kernelRules()
	if err != nil {
		return nil, err
	}
	out := map[netip.AddrPort]servedVIP{}
	for _, r := range rules {
		out[r.VIP] = servedVIP{endpoints: len(r.Endpoints), accepting: len(r.Endpoints) > 0}
	}
	return out, nil
}

func (d *kernelDataplane) kernelRules() ([]kubeproxy.Rule, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.readAt) < rulesMaxAge {
		return d.rules, d.readErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.rules, d.readErr = d.kp.Rules(ctx)
	d.readAt = time.Now()
	return d.rules, d.readErr
}

// startKubeProxy waits for the kubelet's Node, then starts the real
// kube-proxy in the dataplane's mode, and feeds conntrack's view of the
// ClusterIP connections to onConn (nil: none), from the lab's goroutines.
func (d *kernelDataplane) startKubeProxy(ctx context.Context, l *Lab) error {
	nodeName := l.nodeName
	if err := l.waitNode(ctx, nodeName); err != nil {
		return err
	}
	a := d.api
	kc := a.KubeProxy
	kc.Mode, kc.NodeName, kc.ClusterCIDR = a.Dataplane.KubeProxyMode(), nodeName, a.PodCIDR
	if kc.Logger == nil {
		kc.Logger = l.logger
	}
	kp, err := kubeproxy.Start(ctx, kc)
	if err != nil {
		return fmt.Errorf("lab: dataplane %s: %w", a.Dataplane, err)
	}
	d.kp = kp
	l.goRun(func() error {
		<-l.runCtx.Done()
		return kp.Close()
	})
	l.watchExit("kube-proxy", kp)
	started := make(chan struct{})
	var once sync.Once
	l.goRun(func() error {
		err := d.watchConntrack(l, func() { once.Do(func() { close(started) }) })
		once.Do(func() { close(started) })
		return err
	})
	select {
	case <-started:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lab: conntrack -E did not start: %w", ctx.Err())
	}
}

// waitNode waits until the API server has the Node name (the kubelet
// registers it): kube-proxy reads its addresses at start.
func (l *Lab) waitNode(ctx context.Context, name string) error {
	nodes := l.Cluster.Client().CoreV1().Nodes()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := nodes.Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("lab: the kubelet's Node %s was not registered: %w", name, err)
	}
	return nil
}

// watchConntrack runs conntrack -E on the Service range until the lab
// stops and turns each DNATed TCP connection's opening and closing into
// onConn calls, as the pinlab Proxier reports its own relays: client,
// ClusterIP:port, the pod endpoint the kernel chose and its pod's name.
func (d *kernelDataplane) watchConntrack(l *Lab, started func()) error {
	var tr conntrack.Tracker
	return conntrack.Watch(l.runCtx, d.api.ServiceCIDR, started, func(e conntrack.Entry) {
		ep, ok := e.DNAT()
		if !ok || d.onConn == nil {
			return
		}
		ev := proxy.ConnOpened
		switch tr.Add(e) {
		case conntrack.None:
			return
		case conntrack.Closed:
			ev = proxy.ConnClosed
		}
		c := proxy.Conn{Client: e.Orig.Src, VIP: e.Orig.Dst, Endpoint: ep, Pod: l.podAt(ep.Addr()), Opened: e.At}
		c.Service, c.PortName = l.serviceAt(e.Orig.Dst)
		d.onConn(c, ev)
	})
}

// podAt is the name of the pod at ip, "" if none.
func (l *Lab) podAt(ip netip.Addr) string {
	pods, _ := l.Cluster.Factory().Core().V1().Pods().Lister().List(labels.Everything())
	for _, p := range pods {
		if p.Status.PodIP == ip.String() && p.DeletionTimestamp == nil {
			return p.Name
		}
	}
	for _, p := range pods {
		if p.Status.PodIP == ip.String() {
			return p.Name
		}
	}
	return ""
}

// serviceAt names the Service and port whose ClusterIP:port is vip.
func (l *Lab) serviceAt(vip netip.AddrPort) (types.NamespacedName, string) {
	svcs, _ := l.Cluster.Factory().Core().V1().Services().Lister().List(labels.Everything())
	for _, s := range svcs {
		if s.Spec.ClusterIP != vip.Addr().String() {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.Protocol == corev1.ProtocolTCP && p.Port == int32(vip.Port()) {
				return types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, p.Name
			}
		}
	}
	return types.NamespacedName{}, ""
}

// dnsSliceName is the EndpointSlice the lab writes for kube-dns under the
// real kube-proxy.
const dnsSliceName = "kube-dns-pinlab"

// dnsManagedBy marks that slice as the lab's (the EndpointSlice controller
// leaves slices with another manager alone).
const dnsManagedBy = "lab.pinlab.dev"

// publishDNSEndpoints writes kube-dns's EndpointSlice: CoreDNS's own
// address, a pod address (the kernel rejects or drops new connections to
// any Service-range address that is not DNATed), so that the kube-dns
// ClusterIP reaches it through kube-proxy as a CoreDNS pod is reached; the
// lab's clients query it at that address directly (DNSAddr).
func (d *kernelDataplane) publishDNSEndpoints(ctx context.Context, l *Lab) error {
	ap, err := netip.ParseAddrPort(d.dnsAddr())
	if err != nil {
		return fmt.Errorf("lab: DNS address: %w", err)
	}
	ref := clusterdns.DefaultDNSService
	port := int32(ap.Port())
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dnsName, tcpName, ready := "dns", "dns-tcp", true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: dnsSliceName, Namespace: ref.Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: ref.Name, discoveryv1.LabelManagedBy: dnsManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ap.Addr().String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &dnsName, Protocol: &udp, Port: &port}, {Name: &tcpName, Protocol: &tcp, Port: &port}},
	}
	slices := l.Cluster.Client().DiscoveryV1().EndpointSlices(ref.Namespace)
	_, err = slices.Create(ctx, es, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := slices.Get(ctx, dnsSliceName, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("lab: kube-dns EndpointSlice: %w", gerr)
		}
		es.ResourceVersion = old.ResourceVersion
		_, err = slices.Update(ctx, es, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("lab: kube-dns EndpointSlice: %w", err)
	}
	return nil
}
