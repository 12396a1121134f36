package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/manifest"
	"github.com/pinlab/pinlab/scenarios"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Zone is the cluster domain of every lab.
const Zone = "cluster.local"

// Object is a Kubernetes object and the document it came from.
type Object struct {
	Doc manifest.Document
	Obj runtime.Object
}

// File is a checked scenario file.
type File struct {
	Name     string
	Scenario *Scenario
	Objects  []Object
	doc      manifest.Document
}

// supported lists the object kinds a lab runs, by apiVersion/kind.
var supported = map[string]bool{
	"v1/Namespace":                      true,
	"v1/Service":                        true,
	"apps/v1/Deployment":                true,
	"apps/v1/StatefulSet":               true,
	"discovery.k8s.io/v1/EndpointSlice": true,
}

// Open reads a scenario from path, or a built-in scenario by name when no
// such file exists and the name is a built-in's.
func Open(path string) (*File, error) { return open(path, Load) }

// OpenObjects reads manifests for a long-running lab from path or a
// built-in by name; see LoadObjects.
func OpenObjects(path string) (*File, error) { return open(path, LoadObjects) }

// ErrNotFound is returned by Open and OpenObjects for a path that is
// neither a file nor a built-in.
var ErrNotFound = errors.New("no such file or built-in")

func open(path string, load func(string, []byte) (*File, error)) (*File, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if b, ok := scenarios.Get(path); ok {
			return load("builtin:"+path, b)
		}
		return nil, fmt.Errorf("scenario: %s: %w (built-in scenarios: %s; lab manifests: %s)", path, ErrNotFound,
			strings.Join(scenarios.Names(), ", "), strings.Join(labManifests(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return load(path, data)
}

// labManifests lists the built-ins that are manifests for lab up only.
func labManifests() []string {
	var out []string
	for _, m := range scenarios.Manifests() {
		if !slices.Contains(scenarios.Names(), m) {
			out = append(out, m)
		}
	}
	return out
}

// Load parses and checks a scenario file: Kubernetes objects plus exactly
// one Scenario document, all strictly decoded, with every reference the
// scenario makes resolved against the objects.
func Load(name string, data []byte) (*File, error) {
	f, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	if f.Scenario == nil {
		return nil, &manifest.Error{File: name, Err: fmt.Errorf("no Scenario document; add one with apiVersion: %s and kind: %s", APIVersion, Kind)}
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// LoadObjects parses and checks Kubernetes objects for a lab that runs
// until stopped (pinlab lab up). A Scenario document may be present; it is
// decoded strictly but otherwise ignored.
func LoadObjects(name string, data []byte) (*File, error) {
	f, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	if err := f.checkObjects(); err != nil {
		return nil, err
	}
	if err := f.checkWorkloads(); err != nil {
		return nil, err
	}
	return f, nil
}

// parse decodes every document of a file.
func parse(name string, data []byte) (*File, error) {
	docs, err := manifest.Parse(name, data)
	if err != nil {
		return nil, err
	}
	f := &File{Name: name}
	for _, d := range docs {
		if d.Kind == Kind && strings.HasPrefix(d.APIVersion, "pinlab.dev/") {
			if err := f.setScenario(d); err != nil {
				return nil, err
			}
			continue
		}
		if !supported[d.APIVersion+"/"+d.Kind] {
			return nil, d.Errorf("kind", "%s %s is not supported by the lab; expected Namespace or Service (v1), Deployment or StatefulSet (apps/v1), EndpointSlice (discovery.k8s.io/v1) or Scenario (%s)",
				d.APIVersion, d.Kind, APIVersion)
		}
		obj, err := d.Object()
		if err != nil {
			return nil, err
		}
		f.Objects = append(f.Objects, Object{Doc: d, Obj: obj})
	}
	return f, nil
}

func (f *File) setScenario(d manifest.Document) error {
	if d.APIVersion != APIVersion {
		return d.Errorf("apiVersion", "%q is not served; expected %s", d.APIVersion, APIVersion)
	}
	if f.Scenario != nil {
		return d.Errorf("", "a second Scenario document; a file holds exactly one (the first is document %d)", f.doc.Index)
	}
	s := new(Scenario)
	if err := d.Decode(s); err != nil {
		return err
	}
	f.Scenario, f.doc = s, d
	return nil
}

// check validates the scenario and its references, with errors at the
// field's line.
func (f *File) check() error {
	d, sp := f.doc, &f.Scenario.Spec
	if err := f.checkObjects(); err != nil {
		return err
	}
	if err := f.checkWorkloads(); err != nil {
		return err
	}

	if sp.Duration.Duration <= 0 || sp.Duration.Duration > MaxDuration {
		return d.Errorf("spec.duration", "%v: expected a positive duration up to %v, such as 60s", sp.Duration.Duration, MaxDuration)
	}
	if len(sp.Clients) == 0 {
		return d.Errorf("spec.clients", "at least one client group is required")
	}
	groups := map[string]bool{}
	for i := range sp.Clients {
		if err := f.checkClient(i, groups); err != nil {
			return err
		}
	}
	stepNames := map[string]bool{}
	for i, st := range sp.Timeline {
		if err := f.checkStep(i, st, groups, stepNames); err != nil {
			return err
		}
	}
	windows := map[string]bool{}
	for i, w := range sp.Windows {
		p := fmt.Sprintf("spec.windows[%d]", i)
		if w.Name == "" {
			return d.Errorf(p+".name", "required")
		}
		if windows[w.Name] {
			return d.Errorf(p+".name", "window %q is defined twice", w.Name)
		}
		windows[w.Name] = true
		if w.From.Duration < 0 || w.To.Duration <= w.From.Duration || w.To.Duration > sp.Duration.Duration {
			return d.Errorf(p, "from %v to %v: expected 0 <= from < to <= duration (%v)", w.From.Duration, w.To.Duration, sp.Duration.Duration)
		}
	}
	names := map[string]bool{}
	for i, v := range sp.Variants {
		if err := f.checkVariant(i, v, names, groups); err != nil {
			return err
		}
	}
	if err := f.checkOfferedLoad(); err != nil {
		return err
	}
	if err := checkCluster(d, "spec.cluster", sp.Cluster); err != nil {
		return err
	}
	for i, e := range sp.Expect {
		if err := f.checkExpectation(i, e); err != nil {
			return err
		}
	}
	if g := sp.GRPC.MinResolutionInterval; g != nil && g.Duration < 0 {
		return d.Errorf("spec.grpc.minResolutionInterval", "must not be negative")
	}
	switch sp.DNS.Pods {
	case "", "disabled", "insecure", "verified":
	default:
		return d.Errorf("spec.dns.pods", "%q: expected disabled, insecure or verified", sp.DNS.Pods)
	}
	if t := sp.DNS.TTL; t != nil && (t.Duration < 0 || t.Duration > time.Hour || t.Duration%time.Second != 0) {
		return d.Errorf("spec.dns.ttl", "%v: expected whole seconds between 0s and 3600s", t.Duration)
	}
	return nil
}

// MaxClients bounds a client group's count.
const MaxClients = 1000

// MaxDuration bounds a run: every load the lab makes stops by itself.
const MaxDuration = time.Hour

// countOf returns a group's client count (default 1).
func countOf(n *int) int {
	if n == nil {
		return 1
	}
	return *n
}

func (f *File) namespaceDeclared(ns string) bool {
	if ns == metav1.NamespaceDefault {
		return true
	}
	for _, o := range f.Objects {
		if o.Doc.Kind == "Namespace" && o.Doc.Name == ns {
			return true
		}
	}
	return false
}

// MaxReplicas bounds a workload's pods in a lab: each pod is a real
// server (about 30 KiB and 2 goroutines idle, more under load), and a lab's
// pod range is one /16.
const MaxReplicas = 1000

// MaxOfferedLoad bounds the calls per second all clients offer together,
// in one variant and in all variants running side by side. Measured on 2
// cores with 3 pods: 8000 calls/s ran with no errors and p99 20-27 ms;
// at 12000, round_robin queued (p50 27 ms); at 20000 most calls missed
// their deadline. Beyond it a run measures the machine, not Kubernetes.
const MaxOfferedLoad = 8000

// MaxPods bounds the pods of one variant (all Deployments at their largest
// over the timeline) and of all variants side by side: each pod is a real
// server; 1000 pods took 17 s to become ready on 2 cores.
const MaxPods = 1000

func (f *File) checkOfferedLoad() error {
	for i, p := range f.Plans() {
		var total float64
		for _, c := range p.Clients {
			total += c.Rate
		}
		if total > MaxOfferedLoad {
			field := "spec.clients"
			if len(f.Scenario.Spec.Variants) > 0 {
				field = fmt.Sprintf("spec.variants[%d]", i)
			}
			return f.doc.Errorf(field, "variant %s offers %.0f calls/s in all (%d clients); expected at most %d calls/s per variant: lower count or rate",
				p.Name, total, len(p.Clients), MaxOfferedLoad)
		}
		if n := f.peakPods(p); n > MaxPods {
			return f.doc.Errorf("spec", "variant %s would run up to %d pods; expected at most %d per variant", p.Name, n, MaxPods)
		}
	}
	return nil
}

// peakPods returns the most pods a plan runs at once: every Deployment at its
// largest replica count over the timeline (scale-downs are not subtracted,
// since terminating pods still run).
func (f *File) peakPods(p Plan) int {
	peak := map[string]int32{}
	for _, w := range f.workloads() {
		peak[w.String()] = w.Replicas
	}
	for _, st := range p.Steps {
		if st.Scale == nil {
			continue
		}
		if w, err := f.scaleTarget(st.Scale); err == nil {
			peak[w.String()] = max(peak[w.String()], *st.Scale.Replicas)
		}
	}
	total := 0
	for _, r := range peak {
		total += int(r)
	}
	return total
}

func (f *File) checkObjects() error {
	seen := map[string]manifest.Document{}
	namespaces := map[string]bool{metav1.NamespaceDefault: true}
	for _, o := range f.Objects {
		if o.Doc.Kind == "Namespace" {
			namespaces[o.Doc.Name] = true
		}
	}
	for _, o := range f.Objects {
		if o.Doc.Name == "" {
			return o.Doc.Errorf("metadata.name", "required")
		}
		key := o.Doc.Kind + "/" + namespaceOf(o.Doc) + "/" + o.Doc.Name
		if prev, ok := seen[key]; ok {
			return o.Doc.Errorf("metadata.name", "%s is defined twice (first in document %d)", o.Doc.What(), prev.Index)
		}
		seen[key] = o.Doc
		if w, ok := asWorkload(o.Obj); ok && w.Replicas > MaxReplicas {
			return o.Doc.Errorf("spec.replicas", "%d: expected at most %d pods per %s in a lab", w.Replicas, MaxReplicas, w.Kind)
		}
		if o.Doc.Kind != "Namespace" && !namespaces[namespaceOf(o.Doc)] {
			return o.Doc.Errorf("metadata.namespace", "namespace %q is not defined in this file; add a Namespace document (the API server would reject the object)", namespaceOf(o.Doc))
		}
	}
	return nil
}

func namespaceOf(d manifest.Document) string {
	if d.Kind == "Namespace" {
		return ""
	}
	if d.Namespace == "" {
		return metav1.NamespaceDefault
	}
	return d.Namespace
}

func (f *File) checkClient(i int, groups map[string]bool) error {
	d, c := f.doc, &f.Scenario.Spec.Clients[i]
	p := fmt.Sprintf("spec.clients[%d]", i)
	if !isDNSLabel(c.Name) {
		return d.Errorf(p+".name", "%q: expected a lowercase DNS label such as order", c.Name)
	}
	if groups[c.Name] {
		return d.Errorf(p+".name", "client group %q is defined twice", c.Name)
	}
	groups[c.Name] = true
	if c.Count != nil && (*c.Count < 1 || *c.Count > MaxClients) {
		return d.Errorf(p+".count", "%d: expected 1 to %d", *c.Count, MaxClients)
	}
	if c.Namespace != "" && !f.namespaceDeclared(c.Namespace) {
		return d.Errorf(p+".namespace", "namespace %q is not defined in this file", c.Namespace)
	}
	if !(c.Rate > 0) || c.Rate > 100000 {
		return d.Errorf(p+".rate", "%v: expected calls per second per client, > 0 and at most 100000", c.Rate)
	}
	if c.Timeout.Duration < 0 {
		return d.Errorf(p+".timeout", "must not be negative")
	}
	if err := checkPolicy(c.Policy); err != nil {
		return d.Errorf(p+".policy", "%v", err)
	}
	t, err := f.resolveTarget(c.Target, c.Namespace)
	if err != nil {
		return d.Errorf(p+".target", "%v", err)
	}
	if err := f.checkProtocolPort(t, c.Protocol); err != nil {
		return d.Errorf(p+".target", "%v", err)
	}
	return checkSettings(d, p, c.ClientSettings)
}

// checkProtocolPort reports a client whose target port leads to the pods'
// server of another protocol: gRPC at the HTTP port, HTTP or WebSocket at
// the gRPC port.
func (f *File) checkProtocolPort(t Target, protocol string) error {
	web := protocol == "http" || protocol == "websocket"
	for _, w := range f.backends(t.Namespace, t.Service) {
		wl, err := kubelet.WorkloadFor(&w.Template.Spec)
		if err != nil {
			continue // reported on the workload
		}
		port := t.Port
		if !t.Headless() {
			for _, sp := range t.Service.Spec.Ports {
				if int(sp.Port) == t.Port {
					if pp, err := podPort(w, sp); err == nil {
						port = pp
					}
				}
			}
		}
		switch {
		case !web && wl.HTTPPort != 0 && port == wl.HTTPPort:
			return fmt.Errorf("port %d leads to the HTTP/1.1 server of the pods of %s %s; a gRPC client needs their gRPC port %d (or set protocol: http or websocket)", t.Port, w.Kind, w.Name, wl.Port)
		case web && port == wl.Port:
			if wl.HTTPPort == 0 {
				return fmt.Errorf("the pods of %s %s serve no HTTP: give them --http-port or a container port named http", w.Kind, w.Name)
			}
			return fmt.Errorf("port %d leads to the gRPC server of the pods of %s %s; a %s client needs their HTTP port %d", t.Port, w.Kind, w.Name, protocol, wl.HTTPPort)
		}
	}
	return nil
}

func checkPolicy(p string) error {
	if p == "" || p == "pick_first" || p == "round_robin" {
		return nil
	}
	return fmt.Errorf("%q: expected one of %s", p, strings.Join(load.Policies, ", "))
}

// clientExists reports whether name is a client group or one client of a
// group ("order" or "order-2").
func (f *File) clientExists(name string) bool {
	for _, c := range f.Scenario.Spec.Clients {
		if name == c.Name {
			return true
		}
		if n, ok := strings.CutPrefix(name, c.Name+"-"); ok {
			if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < countOf(c.Count) {
				return true
			}
		}
	}
	return false
}

func (f *File) checkVariant(i int, v Variant, names, groups map[string]bool) error {
	d := f.doc
	p := fmt.Sprintf("spec.variants[%d]", i)
	if !isDNSLabel(v.Name) {
		return d.Errorf(p+".name", "%q: expected a lowercase name such as headless-rr", v.Name)
	}
	if names[v.Name] {
		return d.Errorf(p+".name", "variant %q is defined twice", v.Name)
	}
	names[v.Name] = true
	overlaid := map[string]bool{}
	for j, o := range v.Clients {
		q := fmt.Sprintf("%s.clients[%d]", p, j)
		if o.Name != "" && !groups[o.Name] {
			return d.Errorf(q+".name", "%q names no client group", o.Name)
		}
		if overlaid[o.Name] {
			what := fmt.Sprintf("group %q", o.Name)
			if o.Name == "" {
				what = "every group (no name)"
			}
			return d.Errorf(q, "a second overlay for %s; merge them into one", what)
		}
		overlaid[o.Name] = true
		if err := checkPolicy(o.Policy); err != nil {
			return d.Errorf(q+".policy", "%v", err)
		}
		// An overlay's settings are checked merged with each group's.
		for _, c := range f.Scenario.Spec.Clients {
			if o.Name == "" || o.Name == c.Name {
				if err := checkSettings(d, q, c.ClientSettings.overlay(o.ClientSettings)); err != nil {
					return err
				}
			}
		}
		if o.Count != nil && (*o.Count < 1 || *o.Count > MaxClients) {
			return d.Errorf(q+".count", "%d: expected 1 to %d", *o.Count, MaxClients)
		}
		if o.Rate < 0 || o.Rate > 100000 {
			return d.Errorf(q+".rate", "%v: expected calls per second per client, > 0 and at most 100000", o.Rate)
		}
		for _, c := range f.Scenario.Spec.Clients {
			if o.Name != "" && o.Name != c.Name {
				continue
			}
			t, err := f.resolveTarget(cmp.Or(o.Target, c.Target), c.Namespace)
			if err != nil {
				return d.Errorf(q+".target", "%v", err)
			}
			if err := f.checkProtocolPort(t, cmp.Or(o.Protocol, c.Protocol)); err != nil {
				return d.Errorf(q+".target", "%v", err)
			}
		}
	}
	if v.Cluster != nil {
		if err := checkCluster(d, p+".cluster", *v.Cluster); err != nil {
			return err
		}
	}
	for j, s := range v.Servers {
		q := fmt.Sprintf("%s.servers[%d]", p, j)
		if _, err := f.overlayTarget(s); err != nil {
			field := q + ".deployment"
			if s.StatefulSet != "" {
				field = q + ".statefulSet"
			}
			return d.Errorf(field, "%v", err)
		}
		for _, a := range []*metav1.Duration{s.MaxConnectionAge, s.MaxConnectionAgeGrace} {
			if a != nil && a.Duration < 0 {
				return d.Errorf(q, "connection ages must not be negative")
			}
		}
		if m := s.MinReadySeconds; m != nil && (*m < 0 || *m > 3600) {
			return d.Errorf(q+".minReadySeconds", "%d: expected 0 to 3600", *m)
		}
		if ps := s.PreStopSleepSeconds; ps != nil {
			w, _ := f.overlayTarget(s)
			grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
			if g := w.Template.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = *g
			}
			if *ps < 0 || *ps > grace {
				return d.Errorf(q+".preStopSleepSeconds", "%d: expected 0 to the pods' terminationGracePeriodSeconds (%d), as the API server requires", *ps, grace)
			}
		}
	}
	return nil
}

// scaleTarget finds the workload a scale step names.
func (f *File) scaleTarget(st *ScaleStep) (workload, error) {
	kind, name, err := ref(st.Deployment, st.StatefulSet)
	if err != nil {
		return workload{}, err
	}
	return f.workload(kind, st.Namespace, name)
}

// overlayTarget finds the workload a server overlay names.
func (f *File) overlayTarget(o ServerOverlay) (workload, error) {
	kind, name, err := ref(o.Deployment, o.StatefulSet)
	if err != nil {
		return workload{}, err
	}
	return f.workload(kind, o.Namespace, name)
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

// Target is a resolved client target.
type Target struct {
	Service   *corev1.Service
	Namespace string
	// Host is the Service's FQDN without the trailing dot.
	Host string
	Port int
}

// Headless reports whether the target Service has no ClusterIP.
func (t Target) Headless() bool { return t.Service.Spec.ClusterIP == corev1.ClusterIPNone }

// GRPCTarget returns the grpc-go target that resolves through dnsAddr.
func (t Target) GRPCTarget(dnsAddr string) string {
	return fmt.Sprintf("dns://%s/%s:%d", dnsAddr, t.Host, t.Port)
}

// resolveTarget checks a client target and finds the Service it names; ns
// completes short names the way a pod's DNS search path does.
func (f *File) resolveTarget(target, ns string) (Target, error) {
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	rest := target
	if r, ok := strings.CutPrefix(target, "dns:"); ok {
		if !strings.HasPrefix(r, "///") {
			return Target{}, fmt.Errorf("%q: lab clients resolve through the lab's cluster DNS; write dns:///<name>:<port> without an authority", target)
		}
		rest = strings.TrimPrefix(r, "///")
	} else if i := strings.Index(target, "://"); i >= 0 || strings.HasPrefix(target, "passthrough:") || strings.HasPrefix(target, "ipv4:") {
		return Target{}, fmt.Errorf("%q: expected <service>.<namespace>.svc.%s:<port>, optionally after dns:///", target, Zone)
	}
	host, portStr, err := net.SplitHostPort(rest)
	if err != nil {
		return Target{}, fmt.Errorf("%q: expected <service>[.<namespace>[.svc.%s]]:<port>", target, Zone)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return Target{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", target, portStr)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	labels := strings.Split(strings.TrimSuffix(strings.TrimSuffix(host, "."+Zone), ".svc"), ".")
	switch len(labels) {
	case 1:
	case 2:
		ns = labels[1]
	default:
		return Target{}, fmt.Errorf("%q: host %q is not a Service name of zone %s", target, host, Zone)
	}
	svc := f.service(ns, labels[0])
	if svc == nil {
		return Target{}, fmt.Errorf("%q: no Service %q in namespace %q in this file", target, labels[0], ns)
	}
	t := Target{Service: svc, Namespace: ns, Host: fmt.Sprintf("%s.%s.svc.%s", svc.Name, ns, Zone), Port: port}
	if err := f.checkClientPort(t); err != nil {
		return Target{}, fmt.Errorf("%q: %w", target, err)
	}
	return t, nil
}

func (f *File) service(ns, name string) *corev1.Service {
	for _, o := range f.Objects {
		if s, ok := o.Obj.(*corev1.Service); ok && s.Name == name && namespaceOf(o.Doc) == ns {
			return s
		}
	}
	return nil
}

func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
