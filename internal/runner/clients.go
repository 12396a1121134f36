package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/l7proxy"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/xds"
	"google.golang.org/grpc/resolver"
	grpcxds "google.golang.org/grpc/xds" // the xds:/// resolver and xDS balancers
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// clients are a variant's running load clients (plan.Clients): index i of
// each slice is the same client.
type clients struct {
	dnsAddr string
	api     kubernetes.Interface // for the "kubernetes" resolver
	rec     *stats.Recorder
	sched   *load.Scheduler // paces every client; run by drive
	plans   []plan.Client
	byIndex []runner
	configs []load.Config    // gRPC clients' settings; zero for others
	proxies []*l7proxy.Proxy // L7 proxies (sidecars, gateways), closed last
	// xds is the variant's xDS control plane, started when a client has
	// an xds:/// target, and xdsResolver grpc-go's xDS resolver for it;
	// closed after the clients.
	xds         *xds.Server
	xdsResolver resolver.Builder
}

// runner is a load client of any protocol.
type runner interface {
	Run(ctx context.Context) error
	Restart() error
	Close()
}

// sidecarPort is where a sidecar L7 proxy listens on its client's IP
// (Istio's outbound capture port).
const sidecarPort = 15001

// newClients creates the variant's load clients, each with its own IP from
// the pod network, as client pods would have, paced by one Scheduler, each
// at a random phase within its first interval (from seed), as independent
// clients are not in step.
func newClients(ctx context.Context, l Cluster, rec *stats.Recorder, t tap, v plan.Variant, seed uint64) (_ *clients, err error) {
	cl := &clients{dnsAddr: l.DNSAddr(), api: l.Client(), rec: rec, sched: load.NewScheduler(), plans: slices.Clone(v.Clients)}
	ph := phases(seed, v.Clients)
	defer func() {
		if err != nil {
			cl.close()
		}
	}()
	if slices.ContainsFunc(cl.plans, func(cp plan.Client) bool { return cp.Target.XDS }) {
		if err := cl.startXDS(ctx, l); err != nil {
			return nil, err
		}
	}
	gateways := map[string]string{} // group -> target
	for i, cp := range cl.plans {
		ip, err := l.AllocateIP()
		if err != nil {
			return nil, fmt.Errorf("client %s: no pod IP: %w", cp.Name, err)
		}
		rec.Client(stats.ClientInfo{Name: cp.Name, Group: cp.Group, Service: cp.Target.Key(), IP: ip})
		obs := clientObserver{rec: rec, name: cp.Name, tap: t}
		phase := ph[i]
		if p := cp.Settings.Protocol; p != plan.ProtocolGRPC {
			c, err := cl.webClient(cp, ip, obs, phase)
			if err != nil {
				return nil, err
			}
			cl.add(c, load.Config{})
			continue
		}
		cfg := cl.loadConfig(cp)
		cfg.Source, cfg.Observer, cfg.Scheduler, cfg.Phase = ip, obs, cl.sched, phase
		if x := cp.Settings.L7Proxy; x != nil {
			if cfg.Target, err = cl.viaProxy(ctx, l, cp, ip, gateways); err != nil {
				return nil, err
			}
			cfg.Policy, cfg.Resolver = "pick_first", load.ResolverGRPC
		}
		c, err := load.New(cfg)
		if err != nil {
			return nil, err
		}
		c.Connect() // as a client process connects when it starts, before load
		cl.add(c, cfg)
	}
	return cl, nil
}

// phases draws each client's phase, its first call's delay within its
// first interval (0 to 1/Rate), from seed: the same seed gives the same
// phases.
func phases(seed uint64, cs []plan.Client) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 3))
	out := make([]time.Duration, len(cs))
	for i, c := range cs {
		out[i] = time.Duration(rng.Float64() * float64(time.Second) / c.Rate)
	}
	return out
}

func (cl *clients) add(c runner, cfg load.Config) {
	cl.byIndex = append(cl.byIndex, c)
	cl.configs = append(cl.configs, cfg)
}

// viaProxy starts the L7 proxy a client dials (its own sidecar, or its
// group's gateway, started once) and returns the client's target.
func (cl *clients) viaProxy(ctx context.Context, l Cluster, cp plan.Client, ip netip.Addr, gateways map[string]string) (string, error) {
	if cp.Settings.L7Proxy.Placement == "gateway" {
		if gateways[cp.Group] == "" {
			t, err := cl.startGateway(ctx, l, cp)
			if err != nil {
				return "", err
			}
			gateways[cp.Group] = t
		}
		return gateways[cp.Group], nil
	}
	p, err := cl.startProxy(ctx, l, cp, netip.AddrPortFrom(ip, sidecarPort), ip)
	if err != nil {
		return "", err
	}
	return "passthrough:///" + p.Addr().String(), nil
}

// loadConfig turns a client plan into a load client's settings (without
// Source and Observer). A "kubernetes" resolver watches the cluster's API;
// an "xds" one asks the variant's control plane.
func (cl *clients) loadConfig(cp plan.Client) load.Config {
	cfg := ClientConfig(cp, cl.dnsAddr, cl.api)
	if cfg.Resolver == load.ResolverXDS {
		cfg.XDS = cl.xdsResolver
	}
	return cfg
}

// ClientConfig is the gRPC load client cp describes, as `lab run` and
// `lab load` run it (without Source, Observer, Scheduler and Phase): its
// target resolved through the cluster DNS at dns ("IP:port"), or, with the
// "kubernetes" resolver, watched through api; a Target with a URI is
// dialled as it is.
func ClientConfig(cp plan.Client, dns string, api kubernetes.Interface) load.Config {
	s := cp.Settings
	cfg := load.Config{
		Name: cp.Name, Target: cp.Target.GRPCTarget(dns), Policy: cp.Policy, PolicySettings: s.PolicySettings, Rate: cp.Rate, Timeout: cp.Timeout,
		Resolver: s.Resolver, HealthCheck: s.HealthCheck, WaitForReady: s.WaitForReady, Stream: s.Stream, StreamLength: s.StreamLength,
		CacheTTL: s.CacheTTL, MinResolutionInterval: s.MinResolutionInterval,
	}
	switch s.Resolver {
	case load.ResolverKubernetes:
		cfg.Target, cfg.Kubernetes = cp.Target.KubernetesTarget(), api
	case load.ResolverXDS:
		cfg.Target = cp.Target.XDSTarget()
	}
	if s.CacheTTL == plan.Forever {
		cfg.CacheTTL = load.Forever
	}
	if r := s.Retry; r != nil {
		cfg.Retry = &load.RetryPolicy{
			MaxAttempts: r.MaxAttempts, InitialBackoff: r.InitialBackoff, MaxBackoff: r.MaxBackoff,
			BackoffMultiplier: r.BackoffMultiplier, RetryableStatusCodes: slices.Clone(r.RetryableStatusCodes),
		}
	}
	return cfg
}

// webClient makes an HTTP/1.1 or WebSocket client for cp, resolving the
// target's name through the cluster DNS for every new connection.
func (cl *clients) webClient(cp plan.Client, ip netip.Addr, obs load.Observer, phase time.Duration) (runner, error) {
	url := fmt.Sprintf("http://%s:%d", cp.Target.Host, cp.Target.Port)
	if cp.Settings.Protocol == plan.ProtocolWebSocket {
		return load.NewWSClient(load.WSConfig{Name: cp.Name, Source: ip, URL: url, DNS: cl.dnsAddr, Rate: cp.Rate, Timeout: cp.Timeout, Observer: obs,
			Scheduler: cl.sched, Phase: phase})
	}
	return load.NewHTTPClient(load.HTTPConfig{Name: cp.Name, Source: ip, URL: url, DNS: cl.dnsAddr, Rate: cp.Rate, Timeout: cp.Timeout, Observer: obs,
		MaxIdleConnsPerHost: cp.Settings.MaxIdleConnsPerHost, MaxConnsPerHost: cp.Settings.MaxConnsPerHost, Scheduler: cl.sched, Phase: phase})
}

// startProxy starts an L7 proxy at listen, dialling pods from source, for
// the Service and port cp targets. Its informers run until the lab stops.
func (cl *clients) startProxy(ctx context.Context, l Cluster, cp plan.Client, listen netip.AddrPort, source netip.Addr) (*l7proxy.Proxy, error) {
	p, err := l7proxy.New(l.Informers(), l7proxy.Config{
		Listen: listen, Source: source, Namespace: cp.Target.Namespace, Service: cp.Target.Service,
		Port: cp.Target.PortName, Policy: cp.Settings.L7Proxy.Policy,
	})
	if err != nil {
		return nil, fmt.Errorf("client %s: L7 proxy: %w", cp.Name, err)
	}
	l.StartInformers() // the ones New added, if any
	if err := p.Start(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("client %s: L7 proxy: %w", cp.Name, err)
	}
	cl.proxies = append(cl.proxies, p)
	return p, nil
}

// startGateway runs a group's gateway: Replicas L7 proxies, each on its own
// pod IP, published as a selector-less ClusterIP Service <service>-l7gw
// with a hand-written EndpointSlice, as a gateway Deployment behind its
// Service would be. It returns the clients' target.
func (cl *clients) startGateway(ctx context.Context, l Cluster, cp plan.Client) (string, error) {
	name := gatewayName(cp.Target.Service)
	port := int32(cp.Target.Port)
	portName := cp.Target.PortName
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: cp.Target.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for i := range cp.Settings.L7Proxy.Replicas {
		ip, err := l.AllocateIP()
		if err != nil {
			return "", fmt.Errorf("gateway for %s: no pod IP: %w", cp.Group, err)
		}
		cl.rec.Peer(ip, fmt.Sprintf("%s-%d", name, i), cp.Group)
		if _, err := cl.startProxy(ctx, l, cp, netip.AddrPortFrom(ip, uint16(port)), ip); err != nil {
			return "", err
		}
		ready := true
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cp.Target.Namespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: portName, Port: port}}},
	}
	if err := l.Apply(ctx, []runtime.Object{svc, slice}); err != nil {
		return "", fmt.Errorf("gateway for %s: %w", cp.Group, err)
	}
	if err := l.WaitReady(ctx); err != nil {
		return "", fmt.Errorf("gateway for %s: %w", cp.Group, err)
	}
	_, zone, _ := strings.Cut(cp.Target.Host, ".svc.") // the target's cluster domain
	return fmt.Sprintf("dns://%s/%s.%s.svc.%s:%d", cl.dnsAddr, name, cp.Target.Namespace, zone, port), nil
}

// gatewayName is the gateway Service of a target Service (a DNS-1035 label).
func gatewayName(svc string) string {
	const suffix = "-l7gw"
	return strings.TrimRight(svc[:min(len(svc), 63-len(suffix))], "-") + suffix
}

// close closes every client, then drains and stops the L7 proxies.
func (cl *clients) close() {
	for _, c := range cl.byIndex {
		c.Close()
	}
	for _, p := range cl.proxies {
		p.Close()
	}
	cl.proxies = nil
	if cl.xds != nil {
		cl.xds.Close()
		cl.xds = nil
	}
}

// xdsNode is the node ID of the lab's xDS clients.
const xdsNode = "pinlab-lab"

// startXDS starts the variant's xDS control plane on a loopback port,
// watching the variant's cluster, and grpc-go's xDS resolver for it
// (each client's channel gets an xDS client and an ADS stream of its
// own from it).
func (cl *clients) startXDS(ctx context.Context, l Cluster) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("xDS control plane: %w", err)
	}
	srv, err := xds.Start(ctx, xds.Config{Clientset: l.Client(), Listener: ln})
	if err != nil {
		return fmt.Errorf("xDS control plane: %w", err)
	}
	cl.xds = srv
	boot, err := xds.Bootstrap(srv.Addr().String(), xdsNode)
	if err == nil {
		// grpc-go's only way to a bootstrap per channel rather than per
		// process (which variants side by side could not share).
		cl.xdsResolver, err = grpcxds.NewXDSResolverWithConfigForTesting(boot)
	}
	if err != nil {
		return fmt.Errorf("xDS resolver: %w", err)
	}
	return nil
}

// index returns the position of client name.
func (cl *clients) index(name string) int {
	return slices.IndexFunc(cl.plans, func(c plan.Client) bool { return c.Name == name })
}

// Restart replaces the channels of the named clients.
func (cl *clients) Restart(names []string) error {
	var errs []error
	for _, n := range names {
		i := cl.index(n)
		if i < 0 {
			errs = append(errs, fmt.Errorf("no client %q", n))
			continue
		}
		err := cl.byIndex[i].Restart()
		if err == nil {
			cl.rec.ClientRestart(n, time.Now())
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Configure gives clients their new settings: each gets a new channel.
func (cl *clients) Configure(next []plan.Client) error {
	var errs []error
	for _, cp := range next {
		i := cl.index(cp.Name)
		if i < 0 {
			errs = append(errs, fmt.Errorf("no client %q", cp.Name))
			continue
		}
		lc, ok := cl.byIndex[i].(*load.Client)
		if !ok {
			errs = append(errs, fmt.Errorf("client %s speaks %s; only gRPC clients can be reconfigured", cp.Name, cp.Settings.Protocol))
			continue
		}
		cfg := cl.loadConfig(cp)
		old := cl.configs[i]
		cfg.Source, cfg.Observer, cfg.Scheduler, cfg.Phase = old.Source, old.Observer, old.Scheduler, old.Phase
		if cp.Settings.L7Proxy != nil { // the client keeps dialling its proxy
			cfg.Target, cfg.Policy, cfg.Resolver = old.Target, old.Policy, old.Resolver
		}
		if err := lc.Reconfigure(cfg); err != nil {
			errs = append(errs, err)
			continue
		}
		cl.plans[i], cl.configs[i] = cp, cfg
		cl.rec.ClientRestart(cp.Name, time.Now())
	}
	return errors.Join(errs...)
}
