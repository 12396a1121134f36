package scenario

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/lbpolicy"
	"github.com/pinlab/pinlab/internal/manifest"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
)

// planner checks a file's Scenario document and resolves it into a plan.
type planner struct {
	f    *File
	doc  manifest.Document
	sp   *Spec
	base objects
}

func newPlanner(f *File) *planner {
	return &planner{f: f, doc: f.doc, sp: &f.Scenario.Spec, base: f.Objects}
}

// siteOf is the site of path in the Scenario document; note prefixes the
// errors there (the variant that caused them).
func (pl *planner) siteOf(path, note string) site {
	s := at(pl.doc, path)
	s.note = note
	return s
}

// plan checks the scenario and builds the plan, variant by variant.
func (pl *planner) plan() (*plan.Plan, error) {
	sp := pl.sp
	top := at(pl.doc, "spec")
	if sp.Duration.Duration <= 0 || sp.Duration.Duration > plan.MaxDuration {
		return nil, top.Errorf("duration", "%v: expected a positive duration up to %v, such as 60s", sp.Duration.Duration, plan.MaxDuration)
	}
	if err := pl.checkGroupNames(); err != nil {
		return nil, err
	}
	if err := pl.checkTimeline(); err != nil {
		return nil, err
	}
	windows, err := pl.windows()
	if err != nil {
		return nil, err
	}
	if err := checkCluster(top.child("cluster"), sp.Cluster); err != nil {
		return nil, err
	}
	p := &plan.Plan{Name: pl.f.Scenario.Metadata.Name, Source: pl.f.Name, Description: sp.Description, Duration: sp.Duration.Duration,
		Windows: windows, Sequential: sp.Sequential}
	if p.DNS, err = pl.dns(); err != nil {
		return nil, err
	}
	if p.MinResolutionInterval, err = pl.minResolution(); err != nil {
		return nil, err
	}
	expects, err := pl.expectations(windows)
	if err != nil {
		return nil, err
	}
	if p.Variants, err = pl.variants(expects); err != nil {
		return nil, err
	}
	for _, st := range p.Variants[0].Steps {
		p.Timeline = append(p.Timeline, st.Describe())
	}
	return p, nil
}

// variants resolves every variant; with none, the scenario itself is the
// one variant "base". The scenario without overlays is checked first, so
// that its own errors are reported without a variant's name.
func (pl *planner) variants(expects []expectation) ([]plan.Variant, error) {
	base, err := pl.variant(-1, Variant{Name: defaultVariantName})
	if err != nil {
		return nil, err
	}
	if len(pl.sp.Variants) == 0 {
		base.Expect = forVariant(expects, base.Name)
		return []plan.Variant{base}, nil
	}
	var out []plan.Variant
	names := map[string]bool{}
	for i, v := range pl.sp.Variants {
		s := at(pl.doc, fmt.Sprintf("spec.variants[%d]", i))
		if !isDNSLabel(v.Name) {
			return nil, s.Errorf("name", "%q: expected a lowercase name such as headless-rr", v.Name)
		}
		if names[v.Name] {
			return nil, s.Errorf("name", "variant %q is defined twice", v.Name)
		}
		names[v.Name] = true
		pv, err := pl.variant(i, v)
		if err != nil {
			return nil, err
		}
		pv.Expect = forVariant(expects, v.Name)
		out = append(out, pv)
	}
	return out, nil
}

func (pl *planner) checkGroupNames() error {
	if len(pl.sp.Clients) == 0 {
		return at(pl.doc, "spec.clients").Errorf("", "at least one client group is required")
	}
	seen := map[string]bool{}
	for i, c := range pl.sp.Clients {
		s := at(pl.doc, fmt.Sprintf("spec.clients[%d]", i))
		if !isDNSLabel(c.Name) {
			return s.Errorf("name", "%q: expected a lowercase DNS label such as order", c.Name)
		}
		if seen[c.Name] {
			return s.Errorf("name", "client group %q is defined twice", c.Name)
		}
		seen[c.Name] = true
	}
	// Clients are named <group>-<n>, and steps name a group or a client:
	// a group called like another group's client would be ambiguous.
	for i, c := range pl.sp.Clients {
		for _, other := range pl.sp.Clients {
			if n, ok := strings.CutPrefix(c.Name, other.Name+"-"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
				return at(pl.doc, fmt.Sprintf("spec.clients[%d]", i)).Errorf("name", "%q is also the name of a client of group %q (clients are named <group>-<n>); rename the group", c.Name, other.Name)
			}
		}
	}
	return nil
}

// plural says "1 client", "2 clients".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func (pl *planner) windows() ([]stats.Window, error) {
	sp := pl.sp
	if len(sp.Windows) == 0 {
		return []stats.Window{{Name: defaultRunWindowName, From: 0, To: sp.Duration.Duration}}, nil
	}
	var out []stats.Window
	seen := map[string]bool{}
	for i, w := range sp.Windows {
		s := at(pl.doc, fmt.Sprintf("spec.windows[%d]", i))
		if w.Name == "" {
			return nil, s.Errorf("name", "required")
		}
		if seen[w.Name] {
			return nil, s.Errorf("name", "window %q is defined twice", w.Name)
		}
		seen[w.Name] = true
		if w.From.Duration < 0 || w.To.Duration <= w.From.Duration || w.To.Duration > sp.Duration.Duration {
			return nil, s.Errorf("", "from %v to %v: expected 0 <= from < to <= duration (%v)", w.From.Duration, w.To.Duration, sp.Duration.Duration)
		}
		out = append(out, stats.Window{Name: w.Name, From: w.From.Duration, To: w.To.Duration})
	}
	return out, nil
}

func (pl *planner) dns() (plan.DNS, error) {
	d, s := pl.sp.DNS, at(pl.doc, "spec.dns")
	out := plan.DNS{TTL: defaultDNSTTL, FixedOrder: d.FixedOrder, Pods: d.Pods}
	switch d.Pods {
	case "":
		out.Pods = defaultDNSPodsMode
	case "disabled", "insecure", "verified":
	default:
		return out, s.Errorf("pods", "%q: expected disabled, insecure or verified", d.Pods)
	}
	if t := d.TTL; t != nil {
		if t.Duration < 0 || t.Duration > time.Hour || t.Duration%time.Second != 0 {
			return out, s.Errorf("ttl", "%v: expected whole seconds between 0s and 3600s", t.Duration)
		}
		out.TTL = t.Duration
	}
	cache, err := dnsCache(d.Cache, at(pl.doc, "spec.dns.cache"))
	out.Cache = cache
	return out, err
}

func (pl *planner) minResolution() (time.Duration, error) {
	g := pl.sp.GRPC.MinResolutionInterval
	if g == nil {
		return plan.DefaultMinResolutionInterval, nil
	}
	if g.Duration < 0 {
		return 0, at(pl.doc, "spec.grpc").Errorf("minResolutionInterval", "must not be negative")
	}
	return g.Duration, nil
}

// variant resolves variant v (index i in spec.variants; -1 for the
// scenario without overlays) into its plan.
func (pl *planner) variant(i int, v Variant) (plan.Variant, error) {
	path, note := "spec", ""
	if i >= 0 {
		path, note = fmt.Sprintf("spec.variants[%d]", i), fmt.Sprintf("in variant %s: ", v.Name)
	}
	pv := plan.Variant{Name: v.Name, Description: v.Description, Index: max(i, 0)}
	objs, patches, err := pl.patch(path, v.Name, v.Patches)
	if err != nil {
		return pv, err
	}
	if objs, pv.Servers, err = pl.servers(path, v.Servers, objs); err != nil {
		return pv, err
	}
	raw := map[string]json.RawMessage{}
	if pv.Groups, pv.Clients, err = pl.groups(path, v.Clients, objs, note, raw); err != nil {
		return pv, err
	}
	if pv.Steps, err = pl.steps(objs, pv.Groups, pv.Clients, raw, note); err != nil {
		return pv, err
	}
	if v.Cluster != nil {
		if err := checkCluster(at(pl.doc, path+".cluster"), *v.Cluster); err != nil {
			return pv, err
		}
	}
	pv.Cluster = pl.sp.Cluster.overlay(v.Cluster).resolve()
	pv.Patches = patches
	for _, o := range objs {
		pv.Objects = append(pv.Objects, o.Obj)
	}
	for _, c := range pv.Clients {
		pv.OfferedLoad += c.Rate
	}
	pv.PeakPods = peakPods(objs, pv.Steps)
	setTargetPods(objs, pv.Steps, pv.Groups, pv.Clients)
	s := pl.siteOf(path, "")
	if pv.OfferedLoad > plan.MaxOfferedLoad {
		return pv, s.Errorf("", "variant %s offers %.0f calls/s in all (%s); expected at most %d calls/s per variant: lower count or rate",
			pv.Name, pv.OfferedLoad, plural(len(pv.Clients), "client"), plan.MaxOfferedLoad)
	}
	if pv.PeakPods > plan.MaxPods {
		return pv, s.Errorf("", "variant %s would run up to %d pods; expected at most %d per variant", pv.Name, pv.PeakPods, plan.MaxPods)
	}
	return pv, nil
}

// groups resolves the client groups with a variant's overlays (at
// path.clients) applied as JSON merge patches, and their clients; raw gets
// each client's settings as a Client document, for configureClient steps.
func (pl *planner) groups(path string, overlays []ClientOverlay, objs objects, note string, raw map[string]json.RawMessage) ([]plan.Group, []plan.Client, error) {
	if err := pl.checkOverlays(path, overlays); err != nil {
		return nil, nil, err
	}
	var groups []plan.Group
	var clients []plan.Client
	for k, c := range pl.sp.Clients {
		gpath := fmt.Sprintf("spec.clients[%d]", k)
		data, err := pl.doc.Raw(gpath)
		if err != nil {
			return nil, nil, at(pl.doc, gpath).Errorf("", "%v", err)
		}
		// In a variant the scenario's own groups were already checked,
		// so an error here is the variant's doing: say so.
		s := site{doc: pl.doc, paths: []string{gpath}, note: note}
		var patches []json.RawMessage
		for j, o := range overlays {
			if o.Name != "" && o.Name != c.Name {
				continue
			}
			opath := fmt.Sprintf("%s.clients[%d]", path, j)
			patch, err := pl.doc.Raw(opath)
			if err != nil {
				return nil, nil, at(pl.doc, opath).Errorf("", "%v", err)
			}
			_, patch, err = withoutKey(patch, "name")
			if err != nil {
				return nil, nil, at(pl.doc, opath).Errorf("", "%v", err)
			}
			patches = append(patches, patch)
			s.paths = append([]string{opath}, s.paths...)
		}
		g, data, err := pl.mergeClient(data, joinPatches(patches), s, objs)
		if err != nil {
			return nil, nil, err
		}
		groups = append(groups, g)
		for n := range g.Clients {
			cl := plan.Client{Name: fmt.Sprintf("%s-%d", g.Name, n), Group: g.Name, Target: g.Target, Policy: g.Policy, Rate: g.Rate, Timeout: g.Timeout, Settings: g.Settings}
			clients = append(clients, cl)
			raw[cl.Name] = data
		}
	}
	return groups, clients, nil
}

// joinPatches merges merge patches into one (later ones win).
func joinPatches(ps []json.RawMessage) json.RawMessage {
	out := json.RawMessage(`{}`)
	for _, p := range ps {
		m, err := jsonpatch.MergeMergePatches(out, p)
		if err == nil {
			out = m
		}
	}
	return out
}

// checkOverlays checks that each client overlay names a group, once.
func (pl *planner) checkOverlays(path string, overlays []ClientOverlay) error {
	seen := map[string]bool{}
	for j, o := range overlays {
		s := at(pl.doc, fmt.Sprintf("%s.clients[%d]", path, j))
		if o.Name != "" && !pl.hasGroup(o.Name) {
			return s.Errorf("name", "%q names no client group", o.Name)
		}
		if seen[o.Name] {
			what := fmt.Sprintf("group %q", o.Name)
			if o.Name == "" {
				what = "every group (no name)"
			}
			return s.Errorf("", "a second overlay for %s; merge them into one", what)
		}
		seen[o.Name] = true
	}
	return nil
}

func (pl *planner) hasGroup(name string) bool {
	for _, c := range pl.sp.Clients {
		if c.Name == name {
			return true
		}
	}
	return false
}

// mergeClient applies a JSON merge patch to a client group document (as
// JSON) and checks and resolves the result against objs; errors go to s.
// It returns the merged document too.
func (pl *planner) mergeClient(doc, patch json.RawMessage, s site, objs objects) (plan.Group, json.RawMessage, error) {
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		return plan.Group{}, nil, s.Errorf("", "cannot apply the overlay: %v", err)
	}
	var c Client
	if err := pl.doc.DecodeAt(s.paths[0], merged, &c); err != nil {
		return plan.Group{}, nil, err
	}
	g, err := checkGroup(s, c, objs)
	return g, merged, err
}

// checkGroup checks one client group (as merged with overlays) against
// objs and resolves it.
func checkGroup(s site, c Client, objs objects) (plan.Group, error) {
	g := plan.Group{Name: c.Name, Clients: 1, Policy: cmp.Or(c.Policy, defaultPolicy), Rate: c.Rate, Timeout: defaultCallTimeout}
	if c.Count != nil {
		if *c.Count < 1 || *c.Count > plan.MaxClients {
			return g, s.Errorf("count", "%d: expected 1 to %d", *c.Count, plan.MaxClients)
		}
		g.Clients = *c.Count
	}
	if c.Namespace != "" && !objs.namespaceDeclared(c.Namespace) {
		return g, s.Errorf("namespace", "namespace %q is not defined in this file", c.Namespace)
	}
	if !(c.Rate > 0) || c.Rate > 100000 {
		return g, s.Errorf("rate", "%v: expected calls per second per client, > 0 and at most 100000", c.Rate)
	}
	if t := c.Timeout; t != nil {
		if t.Duration <= 0 {
			return g, s.Errorf("timeout", "%v: expected a positive deadline for each call; leave timeout out for the default %v", t.Duration, defaultCallTimeout)
		}
		g.Timeout = t.Duration
	}
	if err := checkPolicy(c.Policy); err != nil {
		return g, s.Errorf("policy", "%v", err)
	}
	if err := checkSettings(s, c.ClientSettings); err != nil {
		return g, err
	}
	t, err := objs.target(c.Target, c.Namespace)
	if err != nil {
		return g, s.Errorf("target", "%v", err)
	}
	g.Target, g.Settings = t, c.ClientSettings.resolve()
	if t.XDS {
		if err := xdsGroup(s, c, objs, &g); err != nil {
			return g, err
		}
	} else if err := checkPolicyConfig(g); err != nil {
		return g, s.Errorf(s.first("policyConfig", "policy"), "%v", err)
	}
	if err := objs.checkProtocolPort(t, g.Settings.Protocol); err != nil {
		return g, s.Errorf(s.first("target", "protocol"), "%v", err)
	}
	return g, nil
}

// xdsGroup makes g a client group of an xds:/// target: grpc-go's xDS
// resolver, and the policy the target Service's annotations choose, which
// the control plane serves; a policy, resolver or L7 proxy on the group
// is an error, as are annotations the control plane would ignore.
func xdsGroup(s site, c Client, objs objects, g *plan.Group) error {
	switch {
	case c.Policy != "" || len(c.PolicyConfig) > 0:
		return s.Errorf(s.first("policy", "policyConfig"), "an xds:/// target's policy is the control plane's: annotate the Service with %s (and %s)", lbpolicy.AnnotationPolicy, lbpolicy.AnnotationPolicyConfig)
	case c.Resolver != "":
		return s.Errorf("resolver", "%q: an xds:/// target is resolved by grpc-go's xDS resolver", c.Resolver)
	case c.L7Proxy != nil:
		return s.Errorf("l7Proxy", "an xds:/// client balances each call itself; it has no proxy")
	case g.Settings.Protocol != plan.ProtocolGRPC:
		return s.Errorf("protocol", "%s: an xds:/// target is for gRPC clients (grpc-go's xDS resolver); HTTP/1.1 and WebSocket clients dial the Service's name", g.Settings.Protocol)
	case c.Retry != nil, c.HealthCheck != nil:
		// grpc-go applies no default service config under a resolver
		// that gives one, as the xDS resolver always does.
		return s.Errorf(s.first("retry", "healthCheck"), "an xds:/// client's service config is the control plane's: grpc-go ignores a client's retry and health checking there")
	}
	o, _ := objs.serviceObject(g.Target.Namespace, g.Target.Service)
	annotations := o.Obj.(*corev1.Service).Annotations
	p, od, err := lbpolicy.FromAnnotations(annotations)
	if err != nil {
		// The mistake is the Service's; the client is why it matters.
		return o.Errorf("metadata.annotations", "%v (the xDS control plane would ignore it; client %s targets %s)", err, c.Name, g.Target.XDSTarget())
	}
	g.Policy, g.Settings.Resolver = p.Name, "xds"
	g.Settings.PolicySettings = p.SettingsJSON()
	g.Target.OutlierDetection, g.Target.XDSAnnotated = od, lbpolicy.HasAnnotations(annotations)
	return nil
}

// checkPolicyConfig checks a dns:/// group's policy and its settings as
// grpc-go would take them.
func checkPolicyConfig(g plan.Group) error {
	p, err := lbpolicy.Parse(g.Policy, g.Settings.PolicySettings)
	if err != nil {
		return err
	}
	return p.CheckOutsideXDS()
}

func checkPolicy(p string) error {
	if p == "" || slices.Contains(plan.Policies, p) {
		return nil
	}
	return fmt.Errorf("%q: expected one of %s", p, strings.Join(plan.Policies, ", "))
}

// withoutKey returns the keys of a JSON object other than key, and the
// object without key.
func withoutKey(obj json.RawMessage, key string) ([]string, json.RawMessage, error) {
	var m map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(obj))
	if err := d.Decode(&m); err != nil {
		return nil, nil, err
	}
	delete(m, key)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	out, err := json.Marshal(m)
	return keys, out, err
}
