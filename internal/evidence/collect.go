package evidence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Defaults and bounds of Collect.
const (
	// DefaultWindow is the time between the two samples.
	DefaultWindow = 5 * time.Second
	// ObjectsTimeout bounds listing the objects.
	ObjectsTimeout = 10 * time.Second
	// SampleTimeout bounds one pod's sample (every channelz call in it).
	SampleTimeout = 5 * time.Second
	// Parallel is how many pods are sampled at once.
	Parallel = 8
)

// ErrNoService is returned (wrapped) by Collect when the Service does not
// exist.
var ErrNoService = errors.New("no such Service")

// Request says what to collect.
type Request struct {
	Namespace, Service string
	// Window is the time between the two samples; 0 means DefaultWindow.
	Window time.Duration
	// Sampler reads the pods; nil means a Channelz closed by Collect.
	Sampler Sampler
	// Prometheus, if not nil, gives the pods' call counts over Window
	// instead of the samples (which still give the connections).
	Prometheus *Prometheus
	// Sampling, if not nil, is called once the Service is found, before
	// the first sample, with the number of pods to sample; it must return
	// quickly.
	Sampling func(pods int, window time.Duration)
}

// Collect lists src's objects, finds the Service and its pods, and samples
// each pod twice, Window apart (Parallel pods at once, each sample bounded
// by SampleTimeout). A pod that cannot be sampled keeps its Err and the
// others are still measured; so Collect returns an error only when the
// objects cannot be listed (bounded by ObjectsTimeout), the Service does
// not exist (ErrNoService), or ctx ended (ctx's error, with what was
// collected before). It blocks for about Window plus two samples.
func Collect(ctx context.Context, src Source, req Request) (Evidence, error) {
	if req.Window <= 0 {
		req.Window = DefaultWindow
	}
	if req.Sampler == nil {
		cz := &Channelz{}
		defer cz.Close()
		req.Sampler = cz
	}
	octx, cancel := context.WithTimeout(ctx, ObjectsTimeout)
	objs, err := src.Objects(octx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return Evidence{}, ctx.Err()
		}
		return Evidence{}, fmt.Errorf("evidence: listing objects from %s: %w", src, err)
	}
	ev, err := FromObjects(objs, req.Namespace, req.Service)
	if err != nil {
		return Evidence{}, err
	}
	ev.Source, ev.RatesFrom = src.String(), "channelz"
	if req.Sampling != nil {
		req.Sampling(len(ev.Pods), req.Window)
	}
	if err := ev.sample(ctx, req.Sampler, req.Window); err != nil {
		return ev, err
	}
	if req.Prometheus != nil {
		ev.fromPrometheus(ctx, req.Prometheus, req.Window)
	}
	return ev, ctx.Err()
}

// fromPrometheus replaces the pods' call counts with Prometheus's over
// window. If Prometheus fails, the channelz counts stay and the failure is
// a Problem.
func (ev *Evidence) fromPrometheus(ctx context.Context, p *Prometheus, window time.Duration) {
	var names []string
	for _, pod := range ev.Pods {
		names = append(names, pod.Name)
	}
	if len(names) == 0 {
		return
	}
	calls, queries, err := p.Calls(ctx, ev.Service.Namespace, names, window)
	ev.Queries = queries
	if err != nil {
		ev.Problems = append(ev.Problems, err.Error()+"; the rates are channelz's")
		return
	}
	ev.RatesFrom, ev.Window, ev.Problems = "prometheus", window, nil
	for i := range ev.Pods {
		pod := &ev.Pods[i]
		if pod.Err != "" && pod.Addr != "" {
			pod.ConnsErr, pod.Err = pod.Err, ""
			ev.Problems = append(ev.Problems, fmt.Sprintf("pod %s: connections: %s", pod.Name, pod.ConnsErr))
		}
		c, ok := calls[pod.Name]
		switch {
		case pod.Err != "":
		case !ok:
			pod.Err = "Prometheus has no grpc_server_started_total series for it (is it scraped, with namespace and pod labels?)"
		default:
			pod.Calls = c
		}
		if pod.Err != "" {
			ev.Problems = append(ev.Problems, fmt.Sprintf("pod %s: %s", pod.Name, pod.Err))
		}
	}
}

// FromObjects finds the Service namespace/name in objs and returns the
// Evidence of its objects, pods not yet sampled (their Addr set to their
// gRPC server's address where it can be told).
func FromObjects(objs Objects, namespace, name string) (Evidence, error) {
	var svc *corev1.Service
	var names []string
	for i, s := range objs.Services {
		if s.Namespace == namespace {
			names = append(names, s.Name)
			if s.Name == name {
				svc = &objs.Services[i]
			}
		}
	}
	if svc == nil {
		there := "none"
		if len(names) > 0 {
			slices.Sort(names)
			there = strings.Join(names, ", ")
		}
		return Evidence{}, fmt.Errorf("evidence: %w: %q in namespace %q (Services there: %s)", ErrNoService, name, namespace, there)
	}
	ev := Evidence{Service: service(*svc, objs.EndpointSlices), Peers: map[string]Peer{}}
	pods := selected(*svc, objs)
	for _, p := range pods {
		ev.Pods = append(ev.Pods, podOf(p, grpcPort(*svc, p, objs.EndpointSlices)))
	}
	slices.SortFunc(ev.Pods, func(a, b Pod) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range objs.Services {
		if s.Namespace == namespace && s.Name != name && overlaps(selected(s, objs), pods) {
			ev.Siblings = append(ev.Siblings, service(s, objs.EndpointSlices))
		}
	}
	ev.peers(objs, *svc)
	return ev, nil
}

// service summarises s with its EndpointSlices' counts.
func service(s corev1.Service, slices []discoveryv1.EndpointSlice) Service {
	out := Service{Namespace: s.Namespace, Name: s.Name, Type: string(s.Spec.Type), ClusterIP: s.Spec.ClusterIP, Selector: s.Spec.Selector, Annotations: s.Annotations}
	if out.Type == "" {
		out.Type = string(corev1.ServiceTypeClusterIP)
	}
	for _, p := range s.Spec.Ports {
		out.Ports = append(out.Ports, p.Port)
	}
	for _, sl := range slicesOf(s, slices) {
		for _, ep := range sl.Endpoints {
			out.Endpoints++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out.Ready++
			}
		}
	}
	return out
}

func slicesOf(s corev1.Service, all []discoveryv1.EndpointSlice) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, sl := range all {
		if sl.Namespace == s.Namespace && sl.Labels[discoveryv1.LabelServiceName] == s.Name {
			out = append(out, sl)
		}
	}
	return out
}

// selected returns the pods of s: those its selector matches (not
// terminated), else those its EndpointSlices name or list by IP.
func selected(s corev1.Service, objs Objects) []corev1.Pod {
	var out []corev1.Pod
	if len(s.Spec.Selector) > 0 {
		sel := labels.SelectorFromSet(s.Spec.Selector)
		for _, p := range objs.Pods {
			if p.Namespace == s.Namespace && sel.Matches(labels.Set(p.Labels)) && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				out = append(out, p)
			}
		}
		return out
	}
	ips := map[string]bool{}
	for _, sl := range slicesOf(s, objs.EndpointSlices) {
		for _, ep := range sl.Endpoints {
			for _, a := range ep.Addresses {
				ips[a] = true
			}
		}
	}
	for _, p := range objs.Pods {
		if p.Status.PodIP != "" && ips[p.Status.PodIP] {
			out = append(out, p)
		}
	}
	return out
}

func overlaps(a, b []corev1.Pod) bool {
	for _, p := range a {
		for _, q := range b {
			if p.Namespace == q.Namespace && p.Name == q.Name {
				return true
			}
		}
	}
	return false
}

// grpcPort returns the port the Service sends to on p: its first port's
// number in the Service's EndpointSlices, else its targetPort (a number,
// or p's containerPort of that name), else the port itself.
func grpcPort(s corev1.Service, p corev1.Pod, all []discoveryv1.EndpointSlice) int {
	if len(s.Spec.Ports) == 0 {
		return 0
	}
	sp := s.Spec.Ports[0]
	for _, sl := range slicesOf(s, all) {
		for _, ep := range sl.Ports {
			if ep.Port != nil && (ep.Name == nil && sp.Name == "" || ep.Name != nil && *ep.Name == sp.Name) {
				return int(*ep.Port)
			}
		}
	}
	tp := sp.TargetPort
	switch {
	case tp.IntVal != 0:
		return int(tp.IntVal)
	case tp.StrVal != "":
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == tp.StrVal {
					return int(cp.ContainerPort)
				}
			}
		}
		return 0
	}
	return int(sp.Port)
}

// podOf summarises p, its gRPC server at port (0: unknown).
func podOf(p corev1.Pod, port int) Pod {
	out := Pod{Name: p.Name, IP: p.Status.PodIP, Created: p.CreationTimestamp.Time, Annotations: p.Annotations, Labels: p.Labels}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out.Containers = append(out.Containers, c.Name) // a native sidecar
		}
	}
	for _, c := range p.Spec.Containers {
		out.Containers = append(out.Containers, c.Name)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			out.Ready, out.ReadySince = true, c.LastTransitionTime.Time
		}
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	switch {
	case err != nil:
		out.Err = "no pod IP"
	case port == 0:
		out.Err = "the Service's target port is not a port of this pod"
	default:
		out.Addr = netip.AddrPortFrom(ip, uint16(port)).String()
	}
	return out
}

// peers names every pod IP (any namespace), the endpoints of Services
// other than svc and its pods, and the nodes' addresses.
func (ev *Evidence) peers(objs Objects, svc corev1.Service) {
	for _, sl := range objs.EndpointSlices {
		name := sl.Labels[discoveryv1.LabelServiceName]
		if sl.Namespace == svc.Namespace && name == svc.Name {
			continue
		}
		for _, ep := range sl.Endpoints {
			for _, a := range ep.Addresses {
				ev.Peers[a] = Peer{Kind: "endpoint", Namespace: sl.Namespace, Name: name}
			}
		}
	}
	for _, p := range objs.Pods {
		if p.Status.HostIP != "" && p.Status.HostIP != p.Status.PodIP {
			if _, ok := ev.Peers[p.Status.HostIP]; !ok {
				ev.Peers[p.Status.HostIP] = Peer{Kind: "node", Name: p.Spec.NodeName}
			}
		}
	}
	for _, p := range objs.Pods {
		if p.Status.PodIP == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		pp := podOf(p, 0)
		ev.Peers[p.Status.PodIP] = Peer{Kind: "pod", Namespace: p.Namespace, Name: p.Name, Containers: pp.Containers, Annotations: p.Annotations}
	}
}

// sample reads every pod with an address twice, window apart, and sets
// Window, each pod's Calls (the sampler's own channelz calls taken out) and
// Conns, or its Err.
func (ev *Evidence) sample(ctx context.Context, s Sampler, window time.Duration) error {
	first := ev.sampleAll(ctx, s)
	if err := sleep(ctx, window); err != nil {
		return err
	}
	second := ev.sampleAll(ctx, s)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var took []time.Duration
	for i := range ev.Pods {
		p := &ev.Pods[i]
		if p.Err != "" {
			continue
		}
		a, b := first[i], second[i]
		switch {
		case a.err != nil:
			p.Err = a.err.Error()
		case b.err != nil:
			p.Err = b.err.Error()
		default:
			p.Calls = Calls{
				Started:   max(0, b.Calls.Started-a.Calls.Started-(b.Own.Started-a.Own.Started)),
				Succeeded: max(0, b.Calls.Succeeded-a.Calls.Succeeded-(b.Own.Succeeded-a.Own.Succeeded)),
				Failed:    max(0, b.Calls.Failed-a.Calls.Failed-(b.Own.Failed-a.Own.Failed)),
			}
			p.Conns, p.Health = conns(a.Sample, b.Sample), b.Health
			took = append(took, b.At.Sub(a.At))
		}
		if p.Err != "" {
			ev.Problems = append(ev.Problems, fmt.Sprintf("pod %s: %s", p.Name, p.Err))
		}
	}
	if len(took) > 0 {
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		ev.Window = took[len(took)/2]
	}
	return nil
}

type result struct {
	Sample
	err error
}

// sampleAll samples every pod with an address, Parallel at once.
func (ev *Evidence) sampleAll(ctx context.Context, s Sampler) []result {
	out := make([]result, len(ev.Pods))
	sem := make(chan struct{}, Parallel)
	var wg sync.WaitGroup
	for i, p := range ev.Pods {
		if p.Err != "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sctx, cancel := context.WithTimeout(ctx, SampleTimeout)
			defer cancel()
			sm, err := s.Sample(sctx, netip.MustParseAddrPort(p.Addr))
			out[i] = result{sm, err}
		}()
	}
	wg.Wait()
	return out
}

// conns returns the connections of b with their calls since a.
func conns(a, b Sample) []Conn {
	var out []Conn
	for id, s := range b.Sockets {
		c := Conn{Remote: s.Remote, Total: s.Streams, Calls: s.Streams, New: true}
		if old, ok := a.Sockets[id]; ok {
			c.Calls, c.New = s.Streams-old.Streams, false
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y Conn) int { return cmp.Compare(x.Remote, y.Remote) })
	return out
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
