package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/conntrack"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/proxy"
)

// Dataplane says what serves a lab's ClusterIPs on a real control plane
// (API.Dataplane).
type Dataplane string

const (
	// DataplanePinlab is pinlab's kube-proxy emulation (package proxy), a
	// user-space relay listening on every ClusterIP port; "" means it too.
	DataplanePinlab Dataplane = "pinlab"
	// DataplaneKubeProxyNFTables is the real kube-proxy in nftables mode
	// (package kubeproxy): the kernel DNATs each new connection.
	DataplaneKubeProxyNFTables Dataplane = "kube-proxy-nftables"
	// DataplaneKubeProxyIPTables is the real kube-proxy in iptables mode,
	// through Debian's iptables (its nf_tables backend, iptables-nft).
	DataplaneKubeProxyIPTables Dataplane = "kube-proxy-iptables"
)

// Dataplanes lists the dataplanes, the default first.
var Dataplanes = []Dataplane{DataplanePinlab, DataplaneKubeProxyNFTables, DataplaneKubeProxyIPTables}

// ParseDataplane returns the Dataplane named s ("" is DataplanePinlab).
func ParseDataplane(s string) (Dataplane, error) {
	if s == "" {
		return DataplanePinlab, nil
	}
	if d := Dataplane(s); slices.Contains(Dataplanes, d) {
		return d, nil
	}
	return "", fmt.Errorf("dataplane %q: expected %s", s, joinDataplanes())
}

func joinDataplanes() string {
	var names []string
	for _, d := range Dataplanes {
		names = append(names, string(d))
	}
	return strings.Join(names, ", ")
}

// KubeProxyMode is the real kube-proxy's mode for d; "" for pinlab's.
func (d Dataplane) KubeProxyMode() kubeproxy.Mode {
	switch d {
	case DataplaneKubeProxyNFTables:
		return kubeproxy.ModeNFTables
	case DataplaneKubeProxyIPTables:
		return kubeproxy.ModeIPTables
	}
	return ""
}

// Check reports whether d can run here: the tools its mode needs (nft,
// or iptables, iptables-save and iptables-restore), conntrack, for the
// lab's connection table, and the CoreDNS binary (build/coredns/build.sh)
// with its dnstap plugin, the cluster DNS beside the real kube-proxy.
func (d Dataplane) Check() error {
	mode := d.KubeProxyMode()
	if mode == "" {
		return nil
	}
	if err := kubeproxy.Available(mode); err != nil {
		return err
	}
	if _, err := conntrack.Command(); err != nil {
		return err
	}
	dir, err := coredns.BinDir()
	if err != nil {
		return err
	}
	return coredns.CheckDnstap(dir)
}

// realDataplane is the real kube-proxy under a lab: the process, and the
// kernel's view of it (its rules, cached briefly, and conntrack's events).
type realDataplane struct {
	kp  *kubeproxy.KubeProxy
	svc netip.Prefix

	mu      sync.Mutex
	rules   []kubeproxy.Rule
	readAt  time.Time
	readErr error
}

// rulesMaxAge bounds how often dataplaneShort reads the kernel's rules
// (WaitReady polls every 10 ms; a read execs nft or iptables-save).
const rulesMaxAge = 100 * time.Millisecond

// kernelRules returns kube-proxy's rules, read again when older than
// rulesMaxAge.
func (d *realDataplane) kernelRules() ([]kubeproxy.Rule, error) {
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
// kube-proxy in mode, and feeds conntrack's view of the ClusterIP
// connections to onConn (nil: none), from the lab's goroutines.
func (l *Lab) startKubeProxy(ctx context.Context, a *API, nodeName string, onConn func(proxy.Conn, proxy.ConnEvent)) error {
	if err := l.waitNode(ctx, nodeName); err != nil {
		return err
	}
	kc := a.KubeProxy
	kc.Mode, kc.NodeName, kc.ClusterCIDR = a.Dataplane.KubeProxyMode(), nodeName, a.PodCIDR
	if kc.Logger == nil {
		kc.Logger = l.logger
	}
	kp, err := kubeproxy.Start(ctx, kc)
	if err != nil {
		return fmt.Errorf("lab: dataplane %s: %w", a.Dataplane, err)
	}
	l.real = &realDataplane{kp: kp, svc: a.ServiceCIDR}
	started := make(chan struct{})
	l.goRun(func() error {
		<-l.runCtx.Done()
		return kp.Close()
	})
	l.watchExit("kube-proxy", kp)
	var once sync.Once
	l.goRun(func() error {
		err := l.watchConntrack(l.runCtx, a.ServiceCIDR, func() { once.Do(func() { close(started) }) }, onConn)
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

// watchConntrack runs conntrack -E on the Service range and turns each
// DNATed TCP connection's opening and closing into onConn calls, as the
// pinlab Proxier reports its own relays: client, ClusterIP:port, the pod
// endpoint the kernel chose and its pod's name.
func (l *Lab) watchConntrack(ctx context.Context, svc netip.Prefix, started func(), onConn func(proxy.Conn, proxy.ConnEvent)) error {
	var tr conntrack.Tracker
	return conntrack.Watch(ctx, svc, started, func(e conntrack.Entry) {
		ep, ok := e.DNAT()
		if !ok || onConn == nil {
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
		onConn(c, ev)
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

// served returns, per ClusterIP:port, how many endpoints the dataplane
// DNATs or relays new connections to, and whether it accepts them.
func (l *Lab) served() (map[netip.AddrPort]servedVIP, error) {
	out := map[netip.AddrPort]servedVIP{}
	if l.real == nil {
		for _, r := range l.Proxy.Rules() {
			out[r.VIP] = servedVIP{endpoints: len(r.Endpoints), accepting: r.Listening}
		}
		return out, nil
	}
	rules, err := l.real.kernelRules()
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		out[r.VIP] = servedVIP{endpoints: len(r.Endpoints), accepting: len(r.Endpoints) > 0}
	}
	return out, nil
}

// servedVIP is one ClusterIP port as the dataplane serves it.
type servedVIP struct {
	endpoints int
	accepting bool
}

// dnsSliceName is the EndpointSlice the lab writes for kube-dns under the
// real kube-proxy.
const dnsSliceName = "kube-dns-pinlab"

// dnsManagedBy marks that slice as the lab's (the EndpointSlice controller
// leaves slices with another manager alone).
const dnsManagedBy = "lab.pinlab.dev"

// publishDNSEndpoints writes kube-dns's EndpointSlice: the cluster DNS's
// (CoreDNS's) own address, which under the real kube-proxy is a pod address (the
// kernel rejects or drops new connections to any Service-range address
// that is not DNATed), so that the kube-dns ClusterIP reaches it through
// kube-proxy as a CoreDNS pod is reached; the lab's clients query it at
// that address directly (DNSAddr).
func (l *Lab) publishDNSEndpoints(ctx context.Context) error {
	ap, err := netip.ParseAddrPort(l.DNSAddr())
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

// DNSPodIP is the cluster DNS's address under the real kube-proxy: the
// last but two address of the pod range (10.244.255.253 in 10.244.0.0/16,
// beside the node's), reserved from the pods' addresses. It is the zero
// Addr for a range NodeIP refuses.
func DNSPodIP(pods netip.Prefix) netip.Addr {
	n := NodeIP(pods)
	if !n.IsValid() {
		return n
	}
	return n.Prev()
}

// Dataplane returns the lab's dataplane.
func (l *Lab) Dataplane() Dataplane {
	if l.real == nil {
		return DataplanePinlab
	}
	if l.real.kp.Mode() == kubeproxy.ModeIPTables {
		return DataplaneKubeProxyIPTables
	}
	return DataplaneKubeProxyNFTables
}

// KubeProxyLog is the real kube-proxy's log file; "" under pinlab's
// dataplane.
func (l *Lab) KubeProxyLog() string {
	if l.real == nil {
		return ""
	}
	return l.real.kp.Log()
}
