package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/stats"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Pod picks for PodRef.Pick.
var podPicks = []string{"busiest", "quietest", "oldest", "newest"}

// actions returns the names of the step's action fields that are set.
func (st Step) actions() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(st.Scale != nil, "scale")
	add(st.RestartClient != nil, "restartClient")
	add(st.ConfigureClient != nil, "configureClient")
	add(st.RolloutRestart != nil, "rolloutRestart")
	add(st.Update != nil, "update")
	for _, pa := range st.podActions() {
		add(pa.ref != nil, pa.name)
	}
	return out
}

type podAction struct {
	name string
	ref  *PodRef
	verb string // for descriptions
}

func (st Step) podActions() []podAction {
	return []podAction{
		{"deletePod", st.DeletePod, "delete pod"},
		{"killPod", st.KillPod, "kill pod"},
		{"hangPod", st.HangPod, "hang pod"},
		{"resumePod", st.ResumePod, "resume pod"},
		{"notReady", st.NotReady, "mark not ready"},
		{"ready", st.Ready, "mark ready"},
		{"unhealthy", st.Unhealthy, "make unhealthy"},
		{"healthy", st.Healthy, "make healthy"},
	}
}

// podRef returns the pod the step acts on, if it is a pod action.
func (st Step) podRef() *PodRef {
	for _, pa := range st.podActions() {
		if pa.ref != nil {
			return pa.ref
		}
	}
	return nil
}

func (st Step) podAction() podAction {
	for _, pa := range st.podActions() {
		if pa.ref != nil {
			return pa
		}
	}
	return podAction{}
}

func (r PodRef) String() string {
	if r.Pod != "" {
		return r.Pod
	}
	kind, name, _ := ref(r.Deployment, r.StatefulSet)
	return fmt.Sprintf("%s pod of %s %s", cmp.Or(r.Pick, "busiest"), strings.ToLower(kind), name)
}

func (st Step) describe() string {
	at := st.At.Duration.String()
	switch {
	case st.Scale != nil:
		kind, name, _ := ref(st.Scale.Deployment, st.Scale.StatefulSet)
		return fmt.Sprintf("%s: scale %s %s to %d", at, kind, name, *st.Scale.Replicas)
	case st.RestartClient != nil:
		return fmt.Sprintf("%s: restart client %s", at, st.RestartClient.Client)
	case st.ConfigureClient != nil:
		return fmt.Sprintf("%s: configure client %s (%s)", at, st.ConfigureClient.Client, st.ConfigureClient.describe())
	case st.RolloutRestart != nil:
		kind, name, _ := ref(st.RolloutRestart.Deployment, st.RolloutRestart.StatefulSet)
		return fmt.Sprintf("%s: rollout restart %s %s", at, kind, name)
	case st.Update != nil:
		kind, name, _ := ref(st.Update.Deployment, st.Update.StatefulSet)
		var what []string
		if st.Update.Image != "" {
			what = append(what, "image "+st.Update.Image)
		}
		if st.Update.Args != nil {
			what = append(what, fmt.Sprintf("args %v", st.Update.Args))
		}
		return fmt.Sprintf("%s: update %s %s (%s)", at, kind, name, strings.Join(what, ", "))
	}
	if pa := st.podAction(); pa.ref != nil {
		return fmt.Sprintf("%s: %s %s", at, pa.verb, pa.ref)
	}
	return at
}

func (c ConfigureClientStep) describe() string {
	var parts []string
	if c.Policy != "" {
		parts = append(parts, c.Policy)
	}
	if c.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%g calls/s", c.Rate))
	}
	parts = append(parts, c.ClientSettings.describe()...)
	return strings.Join(parts, ", ")
}

// describe lists the settings that are set, for reports.
func (s ClientSettings) describe() []string {
	var parts []string
	if s.Resolver != "" {
		parts = append(parts, "resolver "+s.Resolver)
	}
	if s.CacheTTL != nil {
		parts = append(parts, "cache TTL "+s.CacheTTL.String())
	}
	if s.MinResolutionInterval != nil {
		parts = append(parts, "min re-resolution "+s.MinResolutionInterval.Duration.String())
	}
	if s.HealthCheck != nil {
		parts = append(parts, fmt.Sprintf("health checking %v", onOff(*s.HealthCheck)))
	}
	if s.WaitForReady != nil {
		parts = append(parts, fmt.Sprintf("wait-for-ready %v", onOff(*s.WaitForReady)))
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
		desc := "L7 " + cmp.Or(x.Placement, "sidecar") + " proxy, " + cmp.Or(x.Policy, "round_robin")
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

// checkStep validates one timeline step.
func (f *File) checkStep(i int, st Step, groups map[string]bool, stepNames map[string]bool) error {
	d := f.doc
	p := fmt.Sprintf("spec.timeline[%d]", i)
	dur := f.Scenario.Spec.Duration.Duration
	if st.At.Duration < 0 || st.At.Duration >= dur {
		return d.Errorf(p+".at", "%v: expected an offset within the run, 0 <= at < %v", st.At.Duration, dur)
	}
	if st.Name != "" {
		if !isDNSLabel(st.Name) {
			return d.Errorf(p+".name", "%q: expected a lowercase name such as unready", st.Name)
		}
		if stepNames[st.Name] {
			return d.Errorf(p+".name", "step name %q is used twice", st.Name)
		}
		stepNames[st.Name] = true
	}
	acts := st.actions()
	if len(acts) != 1 {
		return d.Errorf(p, "expected exactly one action (scale, restartClient, configureClient, rolloutRestart, update, deletePod, killPod, hangPod, resumePod, notReady, ready, unhealthy, healthy); got %s", listOrNone(acts))
	}
	switch {
	case st.Scale != nil:
		if st.Scale.Replicas == nil || *st.Scale.Replicas < 0 {
			return d.Errorf(p+".scale.replicas", "required, >= 0")
		}
		if *st.Scale.Replicas > MaxReplicas {
			return d.Errorf(p+".scale.replicas", "%d: expected at most %d pods per workload in a lab", *st.Scale.Replicas, MaxReplicas)
		}
		if _, err := f.scaleTarget(st.Scale); err != nil {
			return d.Errorf(p+".scale."+refField(st.Scale.StatefulSet), "%v", err)
		}
	case st.RestartClient != nil:
		if !f.clientExists(st.RestartClient.Client) {
			return d.Errorf(p+".restartClient.client", "%q names no client; expected a group name or <group>-<n>", st.RestartClient.Client)
		}
	case st.ConfigureClient != nil:
		c := st.ConfigureClient
		q := p + ".configureClient"
		if !f.clientExists(c.Client) {
			return d.Errorf(q+".client", "%q names no client; expected a group name or <group>-<n>", c.Client)
		}
		if err := checkPolicy(c.Policy); err != nil {
			return d.Errorf(q+".policy", "%v", err)
		}
		if c.Rate < 0 || c.Rate > 100000 {
			return d.Errorf(q+".rate", "%v: expected calls per second per client, > 0 and at most 100000", c.Rate)
		}
		if err := checkSettings(d, q, c.ClientSettings); err != nil {
			return err
		}
		if c.Policy == "" && c.Rate == 0 && len(c.ClientSettings.describe()) == 0 {
			return d.Errorf(q, "changes nothing; set policy, rate or a client setting (restartClient restarts without changes)")
		}
		if c.Protocol != "" || c.MaxIdleConnsPerHost != nil || c.MaxConnsPerHost != nil {
			return d.Errorf(q+".protocol", "a client's protocol and HTTP pool are fixed when it starts; set them on the client group or a variant")
		}
		if c.L7Proxy != nil {
			return d.Errorf(q+".l7Proxy", "an L7 proxy is placed when clients start; set it on the client group or a variant, not in a step")
		}
	case st.RolloutRestart != nil:
		if _, err := f.workloadRef(*st.RolloutRestart); err != nil {
			return d.Errorf(p+".rolloutRestart."+refField(st.RolloutRestart.StatefulSet), "%v", err)
		}
	case st.Update != nil:
		u := st.Update
		if _, err := f.workloadRef(u.WorkloadRef); err != nil {
			return d.Errorf(p+".update."+refField(u.StatefulSet), "%v", err)
		}
		if u.Image == "" && u.Args == nil {
			return d.Errorf(p+".update", "set image, args or both")
		}
		if u.Image != "" && !kubelet.IsPinlabImage(u.Image) {
			return d.Errorf(p+".update.image", "%q: the lab runs only the pinlab image (a new tag such as pinlab:v2 is fine)", u.Image)
		}
		if u.Args != nil {
			if _, err := pod.ParseArgs(u.Args); err != nil {
				return d.Errorf(p+".update.args", "%v", err)
			}
		}
	default:
		pa := st.podAction()
		q := p + "." + pa.name
		r := pa.ref
		if r.Pick != "" && !slices.Contains(podPicks, r.Pick) {
			return d.Errorf(q+".pick", "%q: expected one of %s", r.Pick, strings.Join(podPicks, ", "))
		}
		if r.GracePeriodSeconds != nil && pa.name != "deletePod" {
			return d.Errorf(q+".gracePeriodSeconds", "only deletePod takes a grace period")
		}
		if r.GracePeriodSeconds != nil && *r.GracePeriodSeconds < 0 {
			return d.Errorf(q+".gracePeriodSeconds", "%d: expected >= 0", *r.GracePeriodSeconds)
		}
		switch {
		case r.Pod != "" && (r.Deployment != "" || r.StatefulSet != "" || r.Pick != ""):
			return d.Errorf(q, "name a pod, or a workload (with pick), not both")
		case r.Pod != "":
			if !f.podMayExist(r.Pod, r.Namespace) {
				return d.Errorf(q+".pod", "%q: no StatefulSet in this file has a pod of that name; name a StatefulSet pod (<set>-<ordinal>) or pick one of a workload's pods with deployment/statefulSet and pick", r.Pod)
			}
		default:
			if _, err := f.workloadRef(WorkloadRef{Deployment: r.Deployment, StatefulSet: r.StatefulSet, Namespace: r.Namespace}); err != nil {
				return d.Errorf(q+"."+refField(r.StatefulSet), "%v", err)
			}
		}
	}
	return nil
}

func refField(statefulSet string) string {
	if statefulSet != "" {
		return "statefulSet"
	}
	return "deployment"
}

// podMayExist reports whether name is the name a StatefulSet of the file
// gives one of its pods (set-N), in namespace ns if set.
func (f *File) podMayExist(name, ns string) bool {
	for _, w := range f.workloads() {
		if w.Kind != KindStatefulSet || ns != "" && ns != w.Namespace {
			continue
		}
		if n, ok := strings.CutPrefix(name, w.Name+"-"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return true
		}
	}
	return false
}

// workloadRef finds the workload r names.
func (f *File) workloadRef(r WorkloadRef) (workload, error) {
	kind, name, err := ref(r.Deployment, r.StatefulSet)
	if err != nil {
		return workload{}, err
	}
	return f.workload(kind, r.Namespace, name)
}

// apply carries out one step in the running lab. It returns the pod a pod
// action acted on.
func (r *variantRun) apply(ctx context.Context, l *lab.Lab, rec *stats.Recorder, cl *clients, st Step) (string, error) {
	switch {
	case st.Scale != nil:
		w, err := r.file.scaleTarget(st.Scale)
		if err != nil {
			return "", err
		}
		return "", l.Scale(ctx, w.Kind, w.Namespace, w.Name, *st.Scale.Replicas)
	case st.RestartClient != nil:
		return "", cl.restart(st.RestartClient.Client, rec)
	case st.ConfigureClient != nil:
		return "", cl.configure(*st.ConfigureClient, rec)
	case st.RolloutRestart != nil:
		w, err := r.file.workloadRef(*st.RolloutRestart)
		if err != nil {
			return "", err
		}
		return "", l.Cluster.RolloutRestart(ctx, w.Kind, w.Namespace, w.Name)
	case st.Update != nil:
		w, err := r.file.workloadRef(st.Update.WorkloadRef)
		if err != nil {
			return "", err
		}
		return "", l.UpdateTemplate(ctx, w.Kind, w.Namespace, w.Name, func(t *corev1.PodTemplateSpec) {
			c := &t.Spec.Containers[0]
			if st.Update.Image != "" {
				c.Image = st.Update.Image
			}
			if st.Update.Args != nil {
				c.Args = append([]string(nil), st.Update.Args...)
			}
		})
	}
	pa := st.podAction()
	p, err := r.pickPod(l, rec, *pa.ref)
	if err != nil {
		return "", err
	}
	k := l.Kubelet
	switch pa.name {
	case "deletePod":
		opts := metav1.DeleteOptions{GracePeriodSeconds: pa.ref.GracePeriodSeconds}
		err = l.Cluster.Client().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, opts)
	case "killPod":
		err = k.Kill(p.Namespace, p.Name)
	case "hangPod":
		err = k.Hang(p.Namespace, p.Name, true)
	case "resumePod":
		err = k.Hang(p.Namespace, p.Name, false)
	case "notReady":
		err = k.SetReady(p.Namespace, p.Name, false)
	case "ready":
		err = k.SetReady(p.Namespace, p.Name, true)
	case "unhealthy":
		err = k.SetHealthy(p.Namespace, p.Name, false)
	case "healthy":
		err = k.SetHealthy(p.Namespace, p.Name, true)
	}
	return p.Name, err
}

// pickPod finds the pod a PodRef names in the running lab.
func (r *variantRun) pickPod(l *lab.Lab, rec *stats.Recorder, ref PodRef) (*corev1.Pod, error) {
	pods := l.Cluster.Factory().Core().V1().Pods().Lister()
	if ref.Pod != "" {
		ns := ref.Namespace
		if ns == "" {
			for _, w := range r.file.workloads() {
				if w.Kind == KindStatefulSet && strings.HasPrefix(ref.Pod, w.Name+"-") {
					ns = w.Namespace
				}
			}
		}
		p, err := pods.Pods(ns).Get(ref.Pod)
		if err != nil {
			return nil, fmt.Errorf("no pod %s/%s now", ns, ref.Pod)
		}
		return p, nil
	}
	w, err := r.file.workloadRef(WorkloadRef{Deployment: ref.Deployment, StatefulSet: ref.StatefulSet, Namespace: ref.Namespace})
	if err != nil {
		return nil, err
	}
	all, err := pods.Pods(w.Namespace).List(labels.SelectorFromSet(w.Template.Labels))
	if err != nil {
		return nil, err
	}
	var cands []*corev1.Pod
	for _, p := range all {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("%s has no running pod to pick", w)
	}
	calls := map[string]int64{}
	for _, p := range cands {
		calls[p.Name] = rec.PodCalls(p.Name)
	}
	older := func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	}
	var order func(a, b *corev1.Pod) int
	switch cmp.Or(ref.Pick, "busiest") {
	case "busiest":
		order = func(a, b *corev1.Pod) int { return cmp.Or(cmp.Compare(calls[b.Name], calls[a.Name]), older(a, b)) }
	case "quietest":
		order = func(a, b *corev1.Pod) int { return cmp.Or(cmp.Compare(calls[a.Name], calls[b.Name]), older(a, b)) }
	case "oldest":
		order = older
	case "newest":
		order = func(a, b *corev1.Pod) int { return older(b, a) }
	}
	slices.SortFunc(cands, order)
	return cands[0], nil
}

// errNoClient is returned for a client name that matches nothing.
var errNoClient = errors.New("no such client")
