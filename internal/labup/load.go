package labup

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/xds"
	"google.golang.org/grpc/resolver"
	grpcxds "google.golang.org/grpc/xds"
	corev1 "k8s.io/api/core/v1"
)

// LoadOptions configure Load: `pinlab lab load`'s gRPC clients against a
// running lab up.
type LoadOptions struct {
	// Lab is the running lab's control API.
	Lab *control.Client
	// Target is a Service as "NAME:PORT" (resolved through the lab's DNS
	// as NAME.Namespace.svc.cluster.local), a gRPC target as it is
	// ("dns://...", "passthrough:///IP:PORT"), or an xDS name
	// ("xds:///SERVICE.NAMESPACE:PORT") served by the xDS control plane
	// at XDSServer.
	Target, Namespace string
	// XDSServer is the xDS control plane's "IP:PORT" (a lab address: the
	// pinlab-xds Service's ClusterIP and port 18000 after `kubectl apply
	// -f deploy/xds/pinlab-xds.yaml`), required with an xds:/// Target,
	// which the clients resolve through grpc-go's xDS resolver, each with
	// the policy the control plane sends (Policy is then not used).
	XDSServer string
	// Clients is how many clients run, each with one gRPC channel, Rate
	// each one's calls per second, Policy pick_first or round_robin.
	Clients int
	Rate    float64
	Policy  string
	// Sources are the addresses the clients dial from, in turn (Sources
	// gives them).
	Sources []netip.Addr
	// Duration stops the load after it; zero runs until ctx ends.
	Duration time.Duration
	// AllowFailures is how many failed calls Load still takes as success;
	// more are an error.
	AllowFailures int64
	// Started, if not nil, is told the clients' gRPC target once they run.
	Started func(target string)
}

// Served is what Load's clients got.
type Served struct {
	// ByPod counts the calls each pod answered; Failed the calls that
	// failed, ByCode those by gRPC code, LastFailure the last one's error.
	ByPod       map[string]int64
	Failed      int64
	ByCode      map[string]int64
	LastFailure string
	// Took is how long the clients ran.
	Took time.Duration
}

// How Load notices that the lab stopped: it asks the control API for the
// lab's info every LabCheckEvery (each bounded by labCheckTimeout) and
// stops after LabMisses failures in a row.
const (
	LabCheckEvery   = time.Second
	labCheckTimeout = 2 * time.Second
	LabMisses       = 3
)

// Load runs o's clients until ctx ends or o.Duration is over, and returns
// what they got. If the lab stops answering (LabMisses checks
// LabCheckEvery apart fail), it stops the clients and says so, with what
// they got so far. It fails when more calls failed than o.AllowFailures,
// so that a script can tell a clean load from one with errors.
func Load(ctx context.Context, o LoadOptions) (*Served, error) {
	info, err := o.Lab.Info(ctx)
	if err != nil {
		return nil, err
	}
	target, err := loadTarget(o.Target, o.Namespace)
	if err != nil {
		return nil, err
	}
	xdsRes, err := xdsResolver(target, o.XDSServer)
	if err != nil {
		return nil, err
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var clients []*load.Client
	tally := &tally{s: Served{ByPod: map[string]int64{}}}
	for i := range o.Clients {
		cp := plan.Client{Name: fmt.Sprintf("load-%d", i), Target: target, Policy: o.Policy, Rate: o.Rate}
		if target.XDS {
			cp.Settings.Resolver = load.ResolverXDS
		}
		cfg := runner.ClientConfig(cp, info.DNS, nil)
		cfg.Source, cfg.Observer, cfg.XDS = o.Sources[i%len(o.Sources)], tally, xdsRes
		c, err := load.New(cfg)
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	var wg sync.WaitGroup
	gone := make(chan error, 1)
	wg.Go(func() { gone <- watchLab(ctx, o.Lab, stop) })
	for _, c := range clients {
		wg.Go(func() { c.Run(ctx) })
	}
	if o.Started != nil {
		if target.XDS {
			o.Started(target.XDSTarget() + " through the xDS control plane at " + o.XDSServer)
		} else {
			o.Started(target.GRPCTarget(info.DNS))
		}
	}
	start := time.Now()
	<-ctx.Done()
	wg.Wait()
	s := tally.served(time.Since(start))
	if err := <-gone; err != nil {
		return s, fmt.Errorf("lab load: the lab at %s stopped answering (%d checks %v apart failed, the last: %w); stopped the clients", o.Lab.Addr, LabMisses, LabCheckEvery, err)
	}
	if s.Failed > o.AllowFailures {
		calls := s.Failed
		for _, n := range s.ByPod {
			calls += n
		}
		return s, fmt.Errorf("lab load: %d of %d calls failed (the last: %s); --allow-failures %d", s.Failed, calls, s.LastFailure, o.AllowFailures)
	}
	return s, nil // Ctrl-C and the duration are the normal end
}

// CheckPolicy checks a load balancing policy's name: one of
// plan.Policies, the ones the load clients take.
func CheckPolicy(policy string) error {
	if !slices.Contains(plan.Policies, policy) {
		return fmt.Errorf("want one of %v", plan.Policies)
	}
	return nil
}

// loadTarget is the clients' target: a Service as NAME:PORT (in
// namespace, resolved through the lab's DNS) or a gRPC target as it is.
func loadTarget(target, namespace string) (plan.Target, error) {
	if strings.HasPrefix(target, "xds:") && !strings.HasPrefix(target, "xds:///") {
		return plan.Target{}, exit.UsageError(fmt.Errorf("target %q: want xds:///SERVICE.NAMESPACE:PORT (no authority), the name the xDS control plane serves", target))
	}
	if name, ok := strings.CutPrefix(target, "xds:///"); ok {
		host, port, ok := strings.Cut(name, ":")
		svc, ns, dotted := strings.Cut(host, ".")
		n, err := strconv.Atoi(port)
		if !ok || !dotted || svc == "" || ns == "" || strings.Contains(ns, ".") || err != nil || n < 1 || n > 65535 {
			return plan.Target{}, exit.UsageError(fmt.Errorf("target %q: want xds:///SERVICE.NAMESPACE:PORT, the name the xDS control plane serves", target))
		}
		return plan.Target{XDS: true, Service: svc, Namespace: ns, Port: n}, nil
	}
	if strings.Contains(target, "://") {
		if err := load.CheckTarget(target, load.ResolverGRPC); err != nil {
			return plan.Target{}, exit.UsageError(fmt.Errorf("target %q: %w", target, err))
		}
		return plan.Target{URI: target}, nil
	}
	host, port, ok := strings.Cut(target, ":")
	n, err := strconv.Atoi(port)
	if !ok || host == "" || err != nil {
		return plan.Target{}, exit.UsageError(fmt.Errorf("target %q: want NAME:PORT or a gRPC target", target))
	}
	if !strings.Contains(host, ".") {
		host += "." + namespace + ".svc.cluster.local"
	}
	return plan.Target{Host: host, Port: n}, nil
}

// watchLab asks c for the lab's info every LabCheckEvery until ctx ends
// (then it returns nil); after LabMisses failures in a row it calls stop
// and returns the last error.
func watchLab(ctx context.Context, c *control.Client, stop context.CancelFunc) error {
	t := time.NewTicker(LabCheckEvery)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, labCheckTimeout)
		_, err := c.Info(ictx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			misses = 0
		default:
			if misses++; misses == LabMisses {
				stop()
				return err
			}
		}
	}
}

// tally counts calls per answering pod, as a load.Observer.
type tally struct {
	mu sync.Mutex
	s  Served
}

func (t *tally) Called(r load.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.Err != nil || r.Pod == "" {
		t.s.Failed++
		if t.s.ByCode == nil {
			t.s.ByCode = map[string]int64{}
		}
		t.s.ByCode[r.Code.String()]++
		if r.Err != nil {
			t.s.LastFailure = r.Err.Error()
		}
		return
	}
	t.s.ByPod[r.Pod]++
}

func (t *tally) Conn(load.ConnEvent) {}

// served is a copy of what was counted, over took.
func (t *tally) served(took time.Duration) *Served {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.s
	s.ByPod, s.ByCode = clone(s.ByPod), clone(s.ByCode)
	s.Took = took
	return &s
}

func clone(m map[string]int64) map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Sources returns the addresses `lab load` dials from: with deployment
// empty, n addresses no pod has (127.0.1.1, ...; on a real control plane,
// whose pods are not on loopback, the top of the pod range, 10.244.254.1,
// ...); else the running pods of Deployment deployment in namespace, one
// client per pod in turn.
func Sources(ctx context.Context, lab *control.Client, podCIDR string, n int, namespace, deployment string) ([]netip.Addr, error) {
	if deployment == "" {
		return freeSources(podCIDR, n), nil
	}
	objs, err := lab.Objects(ctx)
	if err != nil {
		return nil, err
	}
	var sel map[string]string
	for _, d := range objs.Deployments {
		if d.Namespace == namespace && d.Name == deployment && d.Spec.Selector != nil {
			sel = d.Spec.Selector.MatchLabels
		}
	}
	if sel == nil {
		return nil, fmt.Errorf("--from deployment/%s: no Deployment %q in namespace %q", deployment, deployment, namespace)
	}
	var out []netip.Addr
	for _, p := range objs.Pods {
		if p.Namespace != namespace || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning || !matches(sel, p.Labels) {
			continue
		}
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--from deployment/%s: no running pod with an IP", deployment)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// freeSources are n addresses of no pod, for clients outside the cluster.
func freeSources(podCIDR string, n int) []netip.Addr {
	base := netip.AddrFrom4([4]byte{127, 0, 1, 0})
	if p, err := netip.ParsePrefix(podCIDR); err == nil && !p.Addr().IsLoopback() && p.Addr().Is4() && p.Bits() <= 22 {
		// On a real control plane the lab's pods are not on loopback,
		// and a connection from loopback to a pod reads as an in-pod
		// sidecar's: dial from the top of the pod range instead
		// (10.244.254.1, ...), which no pod gets (they count up from
		// its start).
		a := p.Masked().Addr().As4()
		u := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		u += 1<<(32-p.Bits()) - 512
		base = netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
	}
	var out []netip.Addr
	for i := range n {
		a := base.As4()
		a[3] = byte(1 + i%250)
		out = append(out, netip.AddrFrom4(a))
	}
	return out
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// xdsResolver is grpc-go's xDS resolver for an xDS target, with a
// bootstrap naming the control plane at server (a lab address); nil for
// other targets. An xDS target without a server, or a server elsewhere,
// is a usage error.
func xdsResolver(target plan.Target, server string) (resolver.Builder, error) {
	switch {
	case !target.XDS && server != "":
		return nil, exit.UsageError(fmt.Errorf("--xds-server %s: only for an xds:/// target", server))
	case !target.XDS:
		return nil, nil
	case server == "":
		return nil, exit.UsageError(fmt.Errorf("target %s: name the xDS control plane with --xds-server IP:PORT (deploy/xds's: the pinlab-xds Service's ClusterIP, port 18000)", target.XDSTarget()))
	}
	ap, err := netip.ParseAddrPort(server)
	if err != nil {
		why := ""
		if host, _, serr := net.SplitHostPort(server); serr == nil && net.ParseIP(host) == nil {
			why = "; lab load does not resolve names for it"
		}
		return nil, exit.UsageError(fmt.Errorf("--xds-server %s: want IP:PORT, the control plane's address in the lab (deploy/xds's: the pinlab-xds Service's ClusterIP, port 18000)%s", server, why))
	}
	if err := loopback.CheckIP(ap.Addr()); err != nil {
		return nil, exit.UsageError(fmt.Errorf("--xds-server %s: not an address of the lab (%v)", server, err))
	}
	boot, err := xds.Bootstrap(server, xds.DefaultNode)
	if err != nil {
		return nil, exit.UsageError(fmt.Errorf("--xds-server %s: %w", server, err))
	}
	return grpcxds.NewXDSResolverWithConfigForTesting(boot)
}
