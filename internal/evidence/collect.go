package evidence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// Defaults and bounds of Collect.
const (
	// DefaultWindow is the time from the first reading of each pod to
	// its last.
	DefaultWindow = 5 * time.Second
	// ObjectsTimeout bounds listing the objects.
	ObjectsTimeout = 10 * time.Second
	// SampleTimeout bounds one pod's sample (every channelz call in it).
	SampleTimeout = 5 * time.Second
	// Parallel is how many pods are sampled at once.
	Parallel = 8
	// MaxReadings bounds the readings after the first: one a second up
	// to this many, then evenly spread over the window.
	MaxReadings = 10
)

// ErrNoService is returned (wrapped) by Collect when the Service does not
// exist.
var ErrNoService = errors.New("no such Service")

// Request says what to collect.
type Request struct {
	Namespace, Service string
	// Port names or numbers the Service port whose pods' servers are
	// read; empty: the only port, else the first that says gRPC (its
	// appProtocol or name), else the first.
	Port string
	// Window is the time from the first reading to the last; 0 means
	// DefaultWindow.
	Window time.Duration
	// Sampler reads the pods; nil means a Channelz closed by Collect.
	Sampler Sampler
	// Prometheus, if not nil, gives the pods' call counts over Window
	// instead of the samples (which still give the connections).
	Prometheus *Prometheus
	// Agents, if not nil, reads the pods when some of them serve no
	// channelz and agents run in more pods than channelz answers in, and
	// in no fewer than Exec reads (see useFallbacks): then every pod is
	// read by its agent, so
	// that all pods' figures are bytes, and Sampler, if it is an
	// io.Closer, is closed then (its connections would show as clients).
	Agents AgentSampler
	// Exec, if not nil, reads the pods when some serve no channelz and it
	// reads more pods than channelz answers in and agents run in (see
	// useFallbacks): then every pod is read through it (Exec), in
	// UnitConnMs, and Sampler is closed as for Agents.
	Exec Sampler
	// ExecOff, when Exec is nil, says why ("--no-exec"), for the report.
	ExecOff string
	// Sampling, if not nil, is called once the Service is found and the
	// sampler chosen, before the first sample, with the number of pods to
	// sample and what reads them ("channelz", "agent", "exec"); it must return
	// quickly.
	Sampling func(pods int, window time.Duration, from string)
}

// AgentSampler reads pods through an agent in each (Agents).
type AgentSampler interface {
	Sampler
	// Prepare gets each pod an agent where it can and returns, by pod
	// name, why the others have none.
	Prepare(ctx context.Context, namespace string, pods []Pod) (map[string]string, error)
}

// Collect lists src's objects, finds the Service and its pods, and samples
// each pod several times over Window (see readings; Parallel pods at
// once, each sample bounded
// by SampleTimeout). A pod that cannot be sampled keeps its Err and the
// others are still measured; so Collect returns an error only when the
// objects cannot be listed (bounded by ObjectsTimeout), the Service does
// not exist (ErrNoService), or ctx ended (ctx's error, with what was
// collected before). It blocks for about Window plus one round of readings
// (at once when no pod has an address to read).
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
	ev, err := FromObjects(objs, req.Namespace, req.Service, req.Port)
	if err != nil {
		return Evidence{}, err
	}
	ev.Source, ev.RatesFrom, ev.Unit = src.String(), "channelz", "calls"
	s := req.Sampler
	if req.Agents != nil || req.Exec != nil {
		if s, err = ev.useFallbacks(ctx, req.Sampler, req.Agents, req.Exec, req.ExecOff); err != nil {
			return ev, err
		}
	}
	if req.Sampling != nil {
		req.Sampling(len(ev.Pods), req.Window, ev.RatesFrom)
	}
	if err := ev.sample(ctx, s, req.Window); err != nil {
		return ev, err
	}
	switch {
	case req.Prometheus != nil && ev.Unit == "bytes":
		ev.Problems = append(ev.Problems, "--prometheus not used: the pods were read by pinlab-agent, in bytes, and one Service's figures share one unit")
	case req.Prometheus != nil && ev.Unit == UnitConnMs:
		ev.Problems = append(ev.Problems, "--prometheus not used: the pods' connections were read through exec, and one Service's figures share one unit")
	}
	if req.Prometheus != nil && ev.Unit == "calls" {
		ev.fromPrometheus(ctx, req.Prometheus, req.Window)
	}
	return ev, ctx.Err()
}

// useFallbacks returns the sampler for the pods: cz when every pod with
// an address answers its channelz; else the one that reads the most pods
// of cz, agents once prepared (RatesFrom "agent", Unit "bytes") and exec
// (RatesFrom "exec", Unit UnitConnMs; probed only when agents leave some
// pod unread), a tie going to cz, then agents; cz's choice names what the
// others lacked as a Problem. Either of agents and exec may be nil
// (execOff says why exec is, for that Problem). A pod the chosen fallback
// cannot read gets its Err; cz is closed then, if it is an io.Closer, so
// that its connections are not read as clients'.
func (ev *Evidence) useFallbacks(ctx context.Context, cz Sampler, agents AgentSampler, exec Sampler, execOff string) (Sampler, error) {
	bare, channelz, readable := ev.probe(ctx, cz)
	if len(bare) == 0 || ctx.Err() != nil {
		return cz, ctx.Err()
	}
	var tried []string
	why, withAgent := map[string]string{}, 0
	if agents != nil {
		var err error
		if why, err = agents.Prepare(ctx, ev.Service.Namespace, ev.Pods); err != nil {
			return cz, err
		}
		for _, p := range ev.Pods {
			if _, no := why[p.Name]; p.Addr != "" && p.Err == "" && !no {
				withAgent++
			}
		}
		tried = append(tried, fmt.Sprintf("pinlab-agent runs in %s (%s; --agent-image REF --yes adds it)", podCount(withAgent), firstOf(bare, why, "it runs in "+bare[0])))
	}
	failed, withExec := map[string]string{}, 0
	var execNote string
	switch {
	case exec != nil && withAgent < readable:
		if failed, withExec = ev.probeExec(ctx, exec); ctx.Err() != nil {
			return cz, ctx.Err()
		}
		execNote = fmt.Sprintf("exec read %s (%s)", podCount(withExec), firstOf(bare, failed, "it read "+bare[0]))
	case exec == nil && execOff != "":
		execNote = "exec is off (" + execOff + ")"
	}
	if execNote != "" {
		tried = append(tried, execNote)
	}
	switch {
	case withAgent > channelz && withAgent >= withExec:
		ev.use(cz, "agent", "bytes", "no agent: ", why)
		if len(why) > 0 {
			note := ""
			if execNote != "" {
				note = "; " + execNote
			}
			ev.Problems = append(ev.Problems, fmt.Sprintf("%s without a pinlab-agent that runs, not read (named above; --agent-image REF --yes adds one where it can)%s", podCount(len(why)), note))
		}
		return agents, nil
	case withExec > channelz:
		ev.use(cz, "exec", UnitConnMs, "", failed) // Exec's errors begin "exec: "
		closeSampler(agents)
		return exec, nil
	}
	closeSampler(agents) // their log streams: channelz reads the pods
	ev.Problems = append(ev.Problems, fmt.Sprintf("%d of the %d pods serve no channelz (%s) and no other way reads more pods than channelz answers in (%d): %s; only channelz's pods are read",
		len(bare), len(ev.Pods), strings.Join(bare, ", "), channelz, strings.Join(tried, "; ")))
	return cz, nil
}

// probe reads every pod with an address once through cz and returns the
// pods that serve no channelz (sorted), how many answered and how many
// have an address to read.
func (ev *Evidence) probe(ctx context.Context, cz Sampler) (bare []string, channelz, readable int) {
	for i, r := range ev.sampleAll(ctx, cz) {
		if ev.Pods[i].Addr != "" && ev.Pods[i].Err == "" {
			readable++
		}
		switch {
		case errors.Is(r.err, ErrNoChannelz):
			bare = append(bare, ev.Pods[i].Name)
		case r.err == nil && ev.Pods[i].Err == "":
			channelz++
		}
	}
	slices.Sort(bare)
	return bare, channelz, readable
}

// probeExec reads every pod with an address once through exec and
// returns why it failed, by pod name, and how many it read.
func (ev *Evidence) probeExec(ctx context.Context, exec Sampler) (map[string]string, int) {
	failed, read := map[string]string{}, 0
	for i, r := range ev.sampleAll(ctx, exec) {
		switch p := ev.Pods[i]; {
		case p.Addr == "" || p.Err != "":
		case r.err != nil:
			failed[p.Name] = r.err.Error()
		default:
			read++
		}
	}
	return failed, read
}

// podCount is "1 pod" or "N pods".
func podCount(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// firstOf returns the reason in reasons of the first of names that has
// one, else none.
func firstOf(names []string, reasons map[string]string, none string) string {
	for _, n := range names {
		if r := reasons[n]; r != "" {
			return r
		}
	}
	return none
}

// closeSampler closes s if it is an io.Closer (a nil interface is none).
func closeSampler(s Sampler) {
	if c, ok := s.(io.Closer); ok {
		c.Close()
	}
}

// use records that the pods are read by from (RatesFrom) in unit, closes
// cz if it is an io.Closer (its connections, and port-forwards, would
// show in the readings as clients), and gives each pod named in failed
// its Err (prefix, then the reason) and a Problem.
func (ev *Evidence) use(cz Sampler, from, unit, prefix string, failed map[string]string) {
	ev.RatesFrom, ev.Unit = from, unit
	if c, ok := cz.(io.Closer); ok {
		c.Close()
	}
	for i := range ev.Pods {
		if w, no := failed[ev.Pods[i].Name]; no && ev.Pods[i].Err == "" {
			ev.Pods[i].Err = prefix + w
			ev.Problems = append(ev.Problems, fmt.Sprintf("pod %s: %s", ev.Pods[i].Name, ev.Pods[i].Err))
		}
	}
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
	if len(calls) == 0 {
		ev.Problems = append(ev.Problems, ev.noIncrease(ctx, p, names, window)+"; the rates are channelz's")
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
			pod.Err = fmt.Sprintf("Prometheus has no series of %s for it (is it scraped, with %s?)", p.metricWhat(), p.labelsWhat())
		default:
			pod.Calls = c
		}
		if pod.Err != "" {
			ev.Problems = append(ev.Problems, fmt.Sprintf("pod %s: %s", pod.Name, pod.Err))
		}
	}
}

// noIncrease says why Prometheus gave no pod an increase over window: a
// window too short for two scrapes when the pods have series, else that it
// has none of them.
func (ev *Evidence) noIncrease(ctx context.Context, p *Prometheus, pods []string, window time.Duration) string {
	ev.Queries = append(ev.Queries, p.SeriesQuery(ev.Service.Namespace, pods))
	n, err := p.Series(ctx, ev.Service.Namespace, pods)
	switch {
	case err != nil:
		return fmt.Sprintf("prometheus %s gave no pod's %s over the %v window, and then: %v", p.URL, p.metricWhat(), window, err)
	case n > 0:
		return fmt.Sprintf("prometheus %s has series of %s for %d of the %d pods but none over the %v window: increase() needs two samples in the window, so --window must be at least twice the scrape interval", p.URL, p.metricWhat(), n, len(pods), window)
	}
	return fmt.Sprintf("prometheus %s has no series of %s for any of the %d pods (is it scraping them, with %s? see pinlab lab targets)", p.URL, p.metricWhat(), len(pods), p.labelsWhat())
}

// FromObjects finds the Service namespace/name in objs and returns the
// Evidence of its objects, pods not yet sampled (their Addr set to their
// gRPC server's address where it can be told).
//
// port names or numbers the Service port to diagnose (see servicePort);
// empty chooses one. An unknown port is an error naming the Service's
// ports.
func FromObjects(objs Objects, namespace, name, port string) (Evidence, error) {
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
	switch {
	case svc == nil && len(names) == 0:
		return Evidence{}, fmt.Errorf("evidence: %w: %q: namespace %q has no Services at all (does it exist? name the Service's namespace with -n)", ErrNoService, name, namespace)
	case svc == nil:
		slices.Sort(names)
		return Evidence{}, fmt.Errorf("evidence: %w: %q in namespace %q (Services there: %s)", ErrNoService, name, namespace, strings.Join(names, ", "))
	}
	sp, err := servicePort(*svc, port)
	if err != nil {
		return Evidence{}, err
	}
	ev := Evidence{Service: service(*svc, objs.EndpointSlices), Peers: map[string]Peer{}}
	ev.Service.Workloads = workloads(*svc, objs)
	if len(svc.Spec.Ports) > 0 {
		ev.Service.Port = portList([]corev1.ServicePort{sp})
	}
	pods := selected(*svc, objs)
	own := slicesOf(*svc, objs.EndpointSlices)
	for _, p := range pods {
		port := 0
		if len(svc.Spec.Ports) > 0 {
			port = podPort(sp, p, own)
		}
		ev.Pods = append(ev.Pods, podOf(p, port))
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

// workloads returns the Deployments and StatefulSets of s's namespace
// whose pod template s's selector matches, sorted by kind and name.
func workloads(s corev1.Service, objs Objects) []Workload {
	if len(s.Spec.Selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	var out []Workload
	add := func(kind, ns, name, serviceName string, replicas *int32, tmpl corev1.PodTemplateSpec) {
		if ns == s.Namespace && sel.Matches(labels.Set(tmpl.Labels)) {
			n := int32(1) // the API server's default
			if replicas != nil {
				n = *replicas
			}
			out = append(out, Workload{Kind: kind, Name: name, Replicas: n, ServiceName: serviceName})
		}
	}
	for _, d := range objs.Deployments {
		add("Deployment", d.Namespace, d.Name, "", d.Spec.Replicas, d.Spec.Template)
	}
	for _, st := range objs.StatefulSets {
		add("StatefulSet", st.Namespace, st.Name, st.Spec.ServiceName, st.Spec.Replicas, st.Spec.Template)
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

// servicePort returns the port of s to diagnose: the one named or
// numbered want (an error listing s's ports when none is); else the only
// one; else the first whose appProtocol is grpc or kubernetes.io/h2c, or
// whose name is "grpc" or begins with "grpc-"; else the first.
func servicePort(s corev1.Service, want string) (corev1.ServicePort, error) {
	ports := s.Spec.Ports
	if len(ports) == 0 {
		return corev1.ServicePort{}, nil
	}
	if want != "" {
		for _, p := range ports {
			if p.Name == want || strconv.Itoa(int(p.Port)) == want {
				return p, nil
			}
		}
		return corev1.ServicePort{}, fmt.Errorf("evidence: Service %s/%s has no port %q (its ports: %s)", s.Namespace, s.Name, want, portList(ports))
	}
	for _, p := range ports {
		ap := ptr.Deref(p.AppProtocol, "")
		if ap == "grpc" || ap == "kubernetes.io/h2c" || p.Name == "grpc" || strings.HasPrefix(p.Name, "grpc-") {
			return p, nil
		}
	}
	return ports[0], nil
}

// portList names ports as "name:port" (or "port" when unnamed).
func portList(ports []corev1.ServicePort) string {
	var out []string
	for _, p := range ports {
		if p.Name != "" {
			out = append(out, fmt.Sprintf("%s:%d", p.Name, p.Port))
		} else {
			out = append(out, strconv.Itoa(int(p.Port)))
		}
	}
	return strings.Join(out, ", ")
}

// podPort returns the port the Service port sp sends to on pod p: the
// port of sp's name in the EndpointSlice that lists p (a named targetPort
// can resolve differently per pod, and the EndpointSlice controller puts
// such pods in different slices), else sp's targetPort (a number, or p's
// containerPort of that name), else sp's port; 0 when p has no port of
// that name.
func podPort(sp corev1.ServicePort, p corev1.Pod, slices []discoveryv1.EndpointSlice) int {
	for _, sl := range slices {
		if !lists(sl, p) {
			continue
		}
		for _, ep := range sl.Ports {
			if ep.Port != nil && ptr.Deref(ep.Name, "") == sp.Name {
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

// lists reports whether the EndpointSlice sl has an endpoint for pod p
// (by its targetRef, else by its IP).
func lists(sl discoveryv1.EndpointSlice, p corev1.Pod) bool {
	for _, ep := range sl.Endpoints {
		if r := ep.TargetRef; r != nil && r.Kind == "Pod" {
			if r.Name == p.Name && (r.Namespace == "" || r.Namespace == p.Namespace) {
				return true
			}
			continue
		}
		if p.Status.PodIP != "" && slices.Contains(ep.Addresses, p.Status.PodIP) {
			return true
		}
	}
	return false
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
		if p.Spec.HostNetwork || p.Status.PodIP == p.Status.HostIP {
			continue // the node's address, whatever else runs there (kube-proxy, a CNI agent)
		}
		pp := podOf(p, 0)
		ev.Peers[p.Status.PodIP] = Peer{Kind: "pod", Namespace: p.Namespace, Name: p.Name, Containers: pp.Containers, Annotations: p.Annotations}
	}
}

// readings returns how many readings Collect takes over window: one a
// second (one every window/MaxReadings for windows over MaxReadings
// seconds), two at least.
func readings(window time.Duration) int {
	return 1 + min(MaxReadings, max(1, int(window/time.Second)))
}

// sample reads every pod with an address several times over window (see
// readings; a round that runs late starts the next at once) and sets
// Window, Readings, each pod's Calls (the sampler's own channelz calls
// taken out) and Conns, or its Err. A pod is judged on its first and last
// good readings; its connections on every reading that saw them.
func (ev *Evidence) sample(ctx context.Context, s Sampler, window time.Duration) error {
	if !slices.ContainsFunc(ev.Pods, func(p Pod) bool { return p.Err == "" }) {
		return nil // nothing to read: no waiting for the window
	}
	n, start := readings(window), time.Now()
	rounds := make([][]result, 0, n)
	for k := range n {
		if k > 0 {
			if err := sleep(ctx, time.Until(start.Add(window*time.Duration(k)/time.Duration(n-1)))); err != nil {
				return err
			}
		}
		rounds = append(rounds, ev.sampleAll(ctx, s))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	ev.Readings = n
	var took []time.Duration
	for i := range ev.Pods {
		p := &ev.Pods[i]
		if p.Err != "" {
			continue
		}
		var good []Sample
		var firstErr error
		for _, r := range rounds {
			if r[i].err != nil {
				firstErr = cmp.Or(firstErr, r[i].err)
				continue
			}
			good = append(good, r[i].Sample)
		}
		if len(good) < 2 {
			p.Err = cmp.Or(firstErr, errors.New("read fewer than twice")).Error()
			ev.Problems = append(ev.Problems, fmt.Sprintf("pod %s: %s", p.Name, p.Err))
			continue
		}
		a, b := good[0], good[len(good)-1]
		p.Conns, p.Health, p.Span = conns(good), b.Health, b.At.Sub(a.At)
		took = append(took, p.Span)
		if ev.Unit == "bytes" || ev.Unit == UnitConnMs {
			// An agent's and exec's figures are per connection: a pod's
			// are its connections', closed ones included.
			for _, c := range p.Conns {
				p.Calls.Started += c.Calls
			}
			continue
		}
		p.Calls = Calls{
			Started:   max(0, b.Calls.Started-a.Calls.Started-(b.Own.Started-a.Own.Started)),
			Succeeded: max(0, b.Calls.Succeeded-a.Calls.Succeeded-(b.Own.Succeeded-a.Own.Succeeded)),
			Failed:    max(0, b.Calls.Failed-a.Calls.Failed-(b.Own.Failed-a.Own.Failed)),
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

// sampleAll samples every pod with an address, Parallel at once (or as
// many as s says, when it has a Parallel method: Agents).
func (ev *Evidence) sampleAll(ctx context.Context, s Sampler) []result {
	out := make([]result, len(ev.Pods))
	par := Parallel
	if p, ok := s.(interface{ Parallel() int }); ok {
		par = max(1, p.Parallel())
	}
	sem := make(chan struct{}, par)
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

// conns returns every connection seen in the readings rs (in time
// order), with the calls started on it from the first reading to the last
// that saw it (all of them when it opened after the first reading) and the
// time it was seen open: from the first reading, or from the reading
// before the one it first appeared in, to the last reading that saw it.
func conns(rs []Sample) []Conn {
	type seen struct {
		first, last int
	}
	at := map[int64]*seen{}
	for k, r := range rs {
		for id := range r.Sockets {
			if s := at[id]; s != nil {
				s.last = k
			} else {
				at[id] = &seen{k, k}
			}
		}
	}
	last := len(rs) - 1
	var out []Conn
	for id, s := range at {
		now := rs[s.last].Sockets[id]
		c := Conn{Remote: now.Remote, Total: now.Streams, Calls: now.Streams, Closed: s.last < last}
		from := rs[0].At
		if s.first == 0 {
			c.Calls = now.Streams - rs[0].Sockets[id].Streams
		} else {
			c.New, from = true, rs[s.first-1].At
		}
		c.Life = rs[s.last].At.Sub(from)
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y Conn) int { return cmp.Or(cmp.Compare(x.Remote, y.Remote), cmp.Compare(x.Calls, y.Calls)) })
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
