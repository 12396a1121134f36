package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/l7proxy"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/stats"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// clients are a variant's running load clients and the plans they run,
// which configureClient steps change.
type clients struct {
	dnsAddr string
	plans   []ClientPlan // index-aligned with byIndex
	byIndex []runner
	configs []load.Config    // gRPC clients' settings; zero for others
	proxies []*l7proxy.Proxy // L7 proxies (sidecars, gateways), closed last
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

// newClients creates the plan's load clients, each with its own IP from the
// pod network, as client pods would have.
func newClients(ctx context.Context, l *lab.Lab, rec *stats.Recorder, plans []ClientPlan) (_ *clients, err error) {
	cl := &clients{dnsAddr: l.DNSAddr(), plans: append([]ClientPlan(nil), plans...)}
	defer func() {
		if err != nil {
			for _, c := range cl.byIndex {
				c.Close()
			}
			cl.closeProxies()
		}
	}()
	gateways := map[string]string{} // group -> target
	for _, cp := range cl.plans {
		ip, err := l.Cluster.PodIPs().Allocate()
		if err != nil {
			return nil, fmt.Errorf("client %s: no pod IP: %w", cp.Name, err)
		}
		rec.Client(cp.Name, ip)
		if p := cp.Settings.Protocol; p == "http" || p == "websocket" {
			c, err := cl.webClient(cp, ip, clientObserver{rec: rec, name: cp.Name})
			if err != nil {
				return nil, err
			}
			cl.byIndex = append(cl.byIndex, c)
			cl.configs = append(cl.configs, load.Config{})
			continue
		}
		cfg := loadConfig(cp, cl.dnsAddr)
		cfg.Source = ip
		if x := cp.Settings.L7Proxy; x != nil {
			if x.Placement == "gateway" {
				if gateways[cp.Group] == "" {
					if gateways[cp.Group], err = cl.startGateway(ctx, l, rec, cp); err != nil {
						return nil, err
					}
				}
				cfg.Target, cfg.Policy, cfg.Resolver = gateways[cp.Group], "pick_first", load.ResolverGRPC
			} else {
				p, err := cl.startProxy(ctx, l, cp, netip.AddrPortFrom(ip, sidecarPort), ip)
				if err != nil {
					return nil, err
				}
				cfg.Target, cfg.Policy, cfg.Resolver = "passthrough:///"+p.Addr().String(), "pick_first", load.ResolverGRPC
			}
		}
		cfg.Observer = clientObserver{rec: rec, name: cp.Name}
		c, err := load.New(cfg)
		if err != nil {
			return nil, err
		}
		cl.byIndex = append(cl.byIndex, c)
		cl.configs = append(cl.configs, cfg)
	}
	return cl, nil
}

// loadConfig turns a client plan into a load client's settings (without
// Source and Observer).
func loadConfig(cp ClientPlan, dnsAddr string) load.Config {
	s := cp.Settings
	cfg := load.Config{
		Name: cp.Name, Target: cp.Target.GRPCTarget(dnsAddr), Policy: cp.Policy, Rate: cp.Rate, Timeout: cp.Timeout,
		Resolver:     s.Resolver,
		HealthCheck:  s.HealthCheck != nil && *s.HealthCheck,
		WaitForReady: s.WaitForReady != nil && *s.WaitForReady,
		Stream:       s.Call == "stream",
	}
	if s.CacheTTL != nil {
		cfg.CacheTTL = s.CacheTTL.Duration
		if s.CacheTTL.Duration == Forever {
			cfg.CacheTTL = load.Forever
		}
	} else if s.Resolver == "cached" {
		cfg.CacheTTL = 30 * time.Second
	}
	if s.MinResolutionInterval != nil {
		cfg.MinResolutionInterval = s.MinResolutionInterval.Duration
	}
	if s.StreamLength != nil {
		cfg.StreamLength = s.StreamLength.Duration
	}
	if r := s.Retry; r != nil {
		cfg.Retry = &load.RetryPolicy{
			MaxAttempts: r.MaxAttempts, InitialBackoff: r.InitialBackoff.Duration, MaxBackoff: r.MaxBackoff.Duration,
			BackoffMultiplier: r.BackoffMultiplier,
		}
		for _, c := range r.RetryableStatusCodes {
			cfg.Retry.RetryableStatusCodes = append(cfg.Retry.RetryableStatusCodes, statusCodes[c]) // checked by Load
		}
	}
	return cfg
}

func (cl *clients) all() []runner { return cl.byIndex }

// webClient makes an HTTP/1.1 or WebSocket client for cp, resolving the
// target's name through the cluster DNS for every new connection.
func (cl *clients) webClient(cp ClientPlan, ip netip.Addr, obs load.Observer) (runner, error) {
	url := fmt.Sprintf("http://%s:%d", cp.Target.Host, cp.Target.Port)
	if cp.Settings.Protocol == "websocket" {
		return load.NewWSClient(load.WSConfig{Name: cp.Name, Source: ip, URL: url, DNS: cl.dnsAddr, Rate: cp.Rate, Timeout: cp.Timeout, Observer: obs})
	}
	cfg := load.HTTPConfig{Name: cp.Name, Source: ip, URL: url, DNS: cl.dnsAddr, Rate: cp.Rate, Timeout: cp.Timeout, Observer: obs}
	if v := cp.Settings.MaxIdleConnsPerHost; v != nil {
		cfg.MaxIdleConnsPerHost = *v
	}
	if v := cp.Settings.MaxConnsPerHost; v != nil {
		cfg.MaxConnsPerHost = *v
	}
	return load.NewHTTPClient(cfg)
}

// startProxy starts an L7 proxy at listen, dialling pods from source, for
// the Service and port cp targets.
func (cl *clients) startProxy(ctx context.Context, l *lab.Lab, cp ClientPlan, listen netip.AddrPort, source netip.Addr) (*l7proxy.Proxy, error) {
	x := cp.Settings.L7Proxy
	p, err := l7proxy.New(l.Cluster.Factory(), l7proxy.Config{
		Listen: listen, Source: source, Namespace: cp.Target.Namespace, Service: cp.Target.Service.Name,
		Port: servicePortName(cp.Target), Policy: x.Policy,
	})
	if err != nil {
		return nil, fmt.Errorf("client %s: L7 proxy: %w", cp.Name, err)
	}
	l.Cluster.Factory().Start(ctx.Done()) // starts informers New added, if any
	if err := p.Start(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("client %s: L7 proxy: %w", cp.Name, err)
	}
	cl.proxies = append(cl.proxies, p)
	return p, nil
}

// servicePortName names the Service port a client dials: the one whose
// port (ClusterIP) or target (headless, the pods' port) is the target's
// port; else the first.
func servicePortName(t Target) string {
	ports := t.Service.Spec.Ports
	for _, sp := range ports {
		if int(sp.Port) == t.Port || sp.TargetPort.IntValue() == t.Port {
			return sp.Name
		}
	}
	if len(ports) > 0 {
		return ports[0].Name
	}
	return ""
}

// startGateway runs a group's gateway: Replicas L7 proxies, each on its own
// pod IP, published as a selector-less ClusterIP Service <service>-l7gw
// with a hand-written EndpointSlice, as a gateway Deployment behind its
// Service would be. It returns the clients' target.
func (cl *clients) startGateway(ctx context.Context, l *lab.Lab, rec *stats.Recorder, cp ClientPlan) (string, error) {
	x := cp.Settings.L7Proxy
	n := max(x.Replicas, 1)
	name := gatewayName(cp.Target.Service.Name)
	port := int32(cp.Target.Port)
	portName := servicePortName(cp.Target)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: cp.Target.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for i := range n {
		ip, err := l.Cluster.PodIPs().Allocate()
		if err != nil {
			return "", fmt.Errorf("gateway for %s: no pod IP: %w", cp.Group, err)
		}
		rec.Peer(ip, fmt.Sprintf("%s-%d", name, i))
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
	return fmt.Sprintf("dns://%s/%s.%s.svc.%s:%d", cl.dnsAddr, name, cp.Target.Namespace, Zone, port), nil
}

// gatewayName is the gateway Service of a target Service (a DNS-1035 label).
func gatewayName(svc string) string {
	const suffix = "-l7gw"
	return strings.TrimRight(svc[:min(len(svc), 63-len(suffix))], "-") + suffix
}

// closeProxies drains and stops the L7 proxies, after the clients.
func (cl *clients) closeProxies() {
	for _, p := range cl.proxies {
		p.Close()
	}
	cl.proxies = nil
}

// matching returns the indexes of the clients name selects: one client
// ("order-0") or a group ("order").
func (cl *clients) matching(name string) []int {
	var out []int
	for i, cp := range cl.plans {
		if cp.Name == name || cp.Group == name {
			out = append(out, i)
		}
	}
	return out
}

// restart replaces the channels of the clients name selects.
func (cl *clients) restart(name string, rec *stats.Recorder) error {
	idx := cl.matching(name)
	if len(idx) == 0 {
		return fmt.Errorf("%w %q", errNoClient, name)
	}
	var errs []error
	for _, i := range idx {
		err := cl.byIndex[i].Restart()
		if err == nil {
			rec.ClientRestart(cl.plans[i].Name, time.Now())
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// configure applies a configureClient step to the clients it selects.
func (cl *clients) configure(st ConfigureClientStep, rec *stats.Recorder) error {
	idx := cl.matching(st.Client)
	if len(idx) == 0 {
		return fmt.Errorf("%w %q", errNoClient, st.Client)
	}
	var errs []error
	for _, i := range idx {
		cp := cl.plans[i]
		lc, ok := cl.byIndex[i].(*load.Client)
		if !ok {
			errs = append(errs, fmt.Errorf("client %s speaks %s; only gRPC clients can be reconfigured", cp.Name, cp.Settings.Protocol))
			continue
		}
		if st.Policy != "" {
			cp.Policy = st.Policy
		}
		if st.Rate > 0 {
			cp.Rate = st.Rate
		}
		cp.Settings = cp.Settings.overlay(st.ClientSettings)
		cfg := loadConfig(cp, cl.dnsAddr)
		cfg.Source, cfg.Observer = cl.configs[i].Source, cl.configs[i].Observer
		if cp.Settings.L7Proxy != nil { // the client keeps dialling its proxy
			cfg.Target, cfg.Policy, cfg.Resolver = cl.configs[i].Target, cl.configs[i].Policy, cl.configs[i].Resolver
		}
		if err := lc.Reconfigure(cfg); err != nil {
			errs = append(errs, err)
			continue
		}
		cl.plans[i], cl.configs[i] = cp, cfg
		rec.ClientRestart(cp.Name, time.Now())
	}
	return errors.Join(errs...)
}
