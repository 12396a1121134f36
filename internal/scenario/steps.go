package scenario

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/workload"
)

// stepKind is one kind of timeline action: the step field that sets it and
// how it is checked and resolved into a plan.Action. The actions' own
// descriptions and effects live with their types in package plan.
type stepKind struct {
	field string
	set   func(st *Step) bool
	build func(b *stepBuilder, st *Step, at site) (plan.Action, error)
	pod   bool // the action acts on one pod
}

// stepKinds is every timeline action, in the order the docs list them.
var stepKinds = []stepKind{
	{field: "scale", set: func(st *Step) bool { return st.Scale != nil }, build: (*stepBuilder).scale},
	{field: "restartClient", set: func(st *Step) bool { return st.RestartClient != nil }, build: (*stepBuilder).restartClient},
	{field: "configureClient", set: func(st *Step) bool { return st.ConfigureClient != nil }, build: (*stepBuilder).configureClient},
	{field: "rolloutRestart", set: func(st *Step) bool { return st.RolloutRestart != nil }, build: (*stepBuilder).rolloutRestart},
	{field: "update", set: func(st *Step) bool { return st.Update != nil }, build: (*stepBuilder).update},
	podKind("deletePod", plan.PodDelete, func(st *Step) *PodRef { return st.DeletePod }),
	podKind("killPod", plan.PodKill, func(st *Step) *PodRef { return st.KillPod }),
	podKind("hangPod", plan.PodHang, func(st *Step) *PodRef { return st.HangPod }),
	podKind("resumePod", plan.PodResume, func(st *Step) *PodRef { return st.ResumePod }),
	podKind("notReady", plan.PodNotReady, func(st *Step) *PodRef { return st.NotReady }),
	podKind("ready", plan.PodReady, func(st *Step) *PodRef { return st.Ready }),
	podKind("unhealthy", plan.PodUnhealthy, func(st *Step) *PodRef { return st.Unhealthy }),
	podKind("healthy", plan.PodHealthy, func(st *Step) *PodRef { return st.Healthy }),
}

// podKind is a pod action's kind.
func podKind(field string, verb plan.PodVerb, ref func(*Step) *PodRef) stepKind {
	build := func(b *stepBuilder, st *Step, at site) (plan.Action, error) { return b.pod(verb, ref(st), at) }
	return stepKind{field: field, set: func(st *Step) bool { return ref(st) != nil }, build: build, pod: true}
}

// kinds returns the kinds of action st sets.
func (st *Step) kinds() []stepKind {
	var out []stepKind
	for _, k := range stepKinds {
		if k.set(st) {
			out = append(out, k)
		}
	}
	return out
}

// Pod picks for PodRef.Pick.
var podPicks = []string{"busiest", "quietest", "oldest", "newest"}

// checkTimeline checks what does not depend on a variant: offsets, names
// and that each step sets exactly one action.
func (pl *planner) checkTimeline() error {
	names := map[string]bool{}
	dur := pl.sp.Duration.Duration
	for i := range pl.sp.Timeline {
		st, s := &pl.sp.Timeline[i], at(pl.doc, fmt.Sprintf("spec.timeline[%d]", i))
		if st.At.Duration < 0 || st.At.Duration >= dur {
			return s.Errorf("at", "%v: expected an offset within the run, 0 <= at < %v", st.At.Duration, dur)
		}
		if st.Name != "" {
			if !isDNSLabel(st.Name) {
				return s.Errorf("name", "%q: expected a lowercase name such as unready", st.Name)
			}
			if names[st.Name] {
				return s.Errorf("name", "step name %q is used twice", st.Name)
			}
			names[st.Name] = true
		}
		if ks := st.kinds(); len(ks) != 1 {
			var set, all []string
			for _, k := range ks {
				set = append(set, k.field)
			}
			for _, k := range stepKinds {
				all = append(all, k.field)
			}
			return s.Errorf("", "expected exactly one action (%s); got %s", strings.Join(all, ", "), listOrNone(set))
		}
	}
	return nil
}

// stepBuilder resolves a variant's timeline: against its objects, and its
// clients as configureClient steps change them in order.
type stepBuilder struct {
	pl      *planner
	objs    objects
	groups  []plan.Group
	clients []plan.Client
	raw     map[string]json.RawMessage // client name -> its settings as a Client document
	note    string
	pods    map[string]plan.PodRef // named pod steps built so far -> their pod
}

// steps resolves the timeline for a variant, in order of offset.
func (pl *planner) steps(objs objects, groups []plan.Group, clients []plan.Client, raw map[string]json.RawMessage, note string) ([]plan.Step, error) {
	b := &stepBuilder{pl: pl, objs: objs, groups: groups, clients: slices.Clone(clients), raw: raw, note: note, pods: map[string]plan.PodRef{}}
	order := make([]int, len(pl.sp.Timeline))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return int(pl.sp.Timeline[i].At.Duration - pl.sp.Timeline[j].At.Duration)
	})
	var out []plan.Step
	for _, i := range order {
		st := &pl.sp.Timeline[i]
		k := st.kinds()[0]
		s := pl.siteOf(fmt.Sprintf("spec.timeline[%d].%s", i, k.field), note)
		a, err := k.build(b, st, s)
		if err != nil {
			return nil, err
		}
		if pa, ok := a.(plan.PodAction); ok && st.Name != "" {
			b.pods[st.Name] = pa.Pod
		}
		out = append(out, plan.Step{At: st.At.Duration, Name: st.Name, Action: a})
	}
	return out, nil
}

func (b *stepBuilder) scale(st *Step, at site) (plan.Action, error) {
	sc := st.Scale
	if sc.Replicas == nil || *sc.Replicas < 0 {
		return nil, at.Errorf("replicas", "required, >= 0")
	}
	if *sc.Replicas > plan.MaxReplicas {
		return nil, at.Errorf("replicas", "%d: expected at most %d pods per workload in a lab", *sc.Replicas, plan.MaxReplicas)
	}
	w, err := b.objs.workloadRef(WorkloadRef{Deployment: sc.Deployment, StatefulSet: sc.StatefulSet, Namespace: sc.Namespace})
	if err != nil {
		return nil, at.Errorf(refField(sc.StatefulSet), "%v", err)
	}
	return plan.Scale{Workload: w.ref(), Replicas: *sc.Replicas}, nil
}

func (b *stepBuilder) rolloutRestart(st *Step, at site) (plan.Action, error) {
	w, err := b.objs.workloadRef(*st.RolloutRestart)
	if err != nil {
		return nil, at.Errorf(refField(st.RolloutRestart.StatefulSet), "%v", err)
	}
	return plan.RolloutRestart{Workload: w.ref()}, nil
}

func (b *stepBuilder) update(st *Step, at site) (plan.Action, error) {
	u := st.Update
	w, err := b.objs.workloadRef(u.WorkloadRef)
	if err != nil {
		return nil, at.Errorf(refField(u.StatefulSet), "%v", err)
	}
	if u.Image == "" && u.Args == nil {
		return nil, at.Errorf("", "set image, args or both")
	}
	if u.Image != "" && !workload.IsPinlabImage(u.Image) {
		return nil, at.Errorf("image", "%q: the lab runs only the pinlab image (a new tag such as pinlab:v2 is fine)", u.Image)
	}
	if u.Args != nil {
		if _, err := workload.ParseArgs(u.Args); err != nil {
			return nil, at.Errorf("args", "%v", err)
		}
	}
	return plan.Update{Workload: w.ref(), Image: u.Image, Args: slices.Clone(u.Args)}, nil
}

// selected returns the clients name selects: a group ("order") or one
// client ("order-2").
func (b *stepBuilder) selected(name string, at site) ([]int, error) {
	var idx []int
	for i, c := range b.clients {
		if c.Name == name || c.Group == name {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, at.Errorf("client", "%q names no client; expected a group name or <group>-<n>", name)
	}
	return idx, nil
}

func (b *stepBuilder) restartClient(st *Step, at site) (plan.Action, error) {
	idx, err := b.selected(st.RestartClient.Client, at)
	if err != nil {
		return nil, err
	}
	a := plan.RestartClients{Selector: st.RestartClient.Client}
	for _, i := range idx {
		a.Names = append(a.Names, b.clients[i].Name)
	}
	return a, nil
}

// configureClient applies the step, as a JSON merge patch, to the settings
// each selected client has at that point of the timeline.
func (b *stepBuilder) configureClient(st *Step, at site) (plan.Action, error) {
	c := st.ConfigureClient
	idx, err := b.selected(c.Client, at)
	if err != nil {
		return nil, err
	}
	patch, err := b.pl.doc.Raw(at.paths[len(at.paths)-1])
	if err != nil {
		return nil, at.Errorf("", "%v", err)
	}
	keys, patch, err := withoutKey(patch, "client")
	if err != nil {
		return nil, at.Errorf("", "%v", err)
	}
	if len(keys) == 0 {
		return nil, at.Errorf("", "changes nothing; set policy, rate or a client setting (restartClient restarts without changes)")
	}
	for _, k := range []string{"protocol", "maxIdleConnsPerHost", "maxConnsPerHost"} {
		if slices.Contains(keys, k) {
			return nil, at.Errorf(k, "a client's protocol and HTTP pool are fixed when it starts; set them on the client group or a variant")
		}
	}
	if slices.Contains(keys, "l7Proxy") {
		return nil, at.Errorf("l7Proxy", "an L7 proxy is placed when clients start; set it on the client group or a variant, not in a step")
	}
	a := plan.ConfigureClients{Selector: c.Client, Change: describeChange(c, keys)}
	for _, i := range idx {
		cur := b.clients[i]
		next, raw, err := b.pl.mergeClient(b.raw[cur.Name], patch, at, b.objs)
		if err != nil {
			return nil, err
		}
		nc := plan.Client{Name: cur.Name, Group: cur.Group, Target: cur.Target, Policy: next.Policy, Rate: next.Rate, Timeout: next.Timeout, Settings: next.Settings}
		b.clients[i], b.raw[cur.Name] = nc, raw
		a.Clients = append(a.Clients, nc)
	}
	var total float64
	for _, c := range b.clients {
		total += c.Rate
	}
	if total > plan.MaxOfferedLoad {
		return nil, at.Errorf(at.first("rate", ""), "after this step the clients offer %.0f calls/s in all; expected at most %d calls/s per variant", total, plan.MaxOfferedLoad)
	}
	return a, nil
}

// describeChange says what a configureClient step changes; keys are the
// fields it sets (null ones remove a setting).
func describeChange(c *ConfigureClientStep, keys []string) string {
	var parts []string
	if c.Policy != "" {
		parts = append(parts, c.Policy)
	}
	if c.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%g calls/s", c.Rate))
	}
	parts = append(parts, c.ClientSettings.describe()...)
	for _, k := range keys {
		if !c.sets(k) {
			parts = append(parts, "no "+k)
		}
	}
	return strings.Join(parts, ", ")
}

// sets reports whether the step sets field k to a value (not null).
func (c *ConfigureClientStep) sets(k string) bool {
	b, _ := json.Marshal(c)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	v, ok := m[k]
	return ok && string(v) != "null"
}

func (b *stepBuilder) pod(verb plan.PodVerb, r *PodRef, at site) (plan.Action, error) {
	if r.Pick != "" && !slices.Contains(podPicks, r.Pick) {
		return nil, at.Errorf("pick", "%q: expected one of %s", r.Pick, strings.Join(podPicks, ", "))
	}
	if r.GracePeriodSeconds != nil && verb != plan.PodDelete {
		return nil, at.Errorf("gracePeriodSeconds", "only deletePod takes a grace period")
	}
	if r.GracePeriodSeconds != nil && *r.GracePeriodSeconds < 0 {
		return nil, at.Errorf("gracePeriodSeconds", "%d: expected >= 0", *r.GracePeriodSeconds)
	}
	a := plan.PodAction{Verb: verb, GracePeriodSeconds: r.GracePeriodSeconds}
	switch {
	case r.Pod != "" && (r.Deployment != "" || r.StatefulSet != "" || r.Pick != ""):
		return nil, at.Errorf("", "name a pod, or a workload (with pick), not both")
	case strings.HasPrefix(r.Pod, "@"):
		ref, ok := b.pods[r.Pod[1:]]
		if !ok {
			return nil, at.Errorf("pod", "%q: no earlier step named %q acts on a pod", r.Pod, r.Pod[1:])
		}
		a.Pod = plan.PodRef{Namespace: cmp.Or(ref.Namespace, ref.Workload.Namespace), Name: ref.Name, Step: r.Pod[1:]}
		if ref.Name != "" {
			a.Pod.Step = "" // the earlier step named its pod: so does this one
		}
	case r.Pod != "":
		ns, ok := b.objs.podMayExist(r.Pod, r.Namespace)
		if !ok {
			return nil, at.Errorf("pod", "%q: no StatefulSet in this file has a pod of that name; name a StatefulSet pod (<set>-<ordinal>) or pick one of a workload's pods with deployment/statefulSet and pick", r.Pod)
		}
		a.Pod = plan.PodRef{Namespace: ns, Name: r.Pod}
	default:
		w, err := b.objs.workloadRef(WorkloadRef{Deployment: r.Deployment, StatefulSet: r.StatefulSet, Namespace: r.Namespace})
		if err != nil {
			return nil, at.Errorf(refField(r.StatefulSet), "%v", err)
		}
		a.Pod = plan.PodRef{Workload: w.ref(), Pick: r.Pick}
		if a.Pod.Pick == "" {
			a.Pod.Pick = defaultPodPick
		}
	}
	return a, nil
}

// describe lists the settings that are set, for reports.
func (s ClientSettings) describe() []string {
	var parts []string
	if s.Resolver != "" {
		parts = append(parts, "resolver "+s.Resolver)
	}
	if len(s.PolicyConfig) > 0 {
		parts = append(parts, "policy config "+compactJSON(s.PolicyConfig))
	}
	if s.CacheTTL != nil {
		parts = append(parts, "cache TTL "+s.CacheTTL.String())
	}
	if s.MinResolutionInterval != nil {
		parts = append(parts, "min re-resolution "+s.MinResolutionInterval.Duration.String())
	}
	if s.HealthCheck != nil {
		parts = append(parts, "health checking "+onOff(*s.HealthCheck))
	}
	if s.WaitForReady != nil {
		parts = append(parts, "wait-for-ready "+onOff(*s.WaitForReady))
	}
	if s.Retry != nil {
		parts = append(parts, fmt.Sprintf("retry x%d on %s", s.Retry.MaxAttempts, strings.Join(s.Retry.RetryableStatusCodes, "/")))
	}
	if s.Call != "" {
		parts = append(parts, s.Call+" calls")
	}
	if s.StreamLength != nil {
		parts = append(parts, "streams of "+s.StreamLength.Duration.String())
	}
	if s.Protocol != "" && s.Protocol != "grpc" {
		parts = append(parts, s.Protocol)
	}
	if s.MaxIdleConnsPerHost != nil {
		parts = append(parts, fmt.Sprintf("MaxIdleConnsPerHost %d", *s.MaxIdleConnsPerHost))
	}
	if s.MaxConnsPerHost != nil {
		parts = append(parts, fmt.Sprintf("MaxConnsPerHost %d", *s.MaxConnsPerHost))
	}
	if x := s.L7Proxy; x != nil {
		desc := "L7 " + cmp.Or(x.Placement, defaultL7Placement) + " proxy, " + cmp.Or(x.Policy, defaultL7Policy)
		if x.Replicas > 1 {
			desc += fmt.Sprintf(", %d replicas", x.Replicas)
		}
		parts = append(parts, desc)
	}
	return parts
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// compactJSON is raw without insignificant space (raw as it is when it is
// not JSON).
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
