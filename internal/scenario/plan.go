package scenario

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/stats"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// Plan is one variant, ready to run.
type Plan struct {
	Name        string
	Description string
	Index       int
	Objects     []runtime.Object
	Clients     []ClientPlan
	Steps       []Step
	Windows     []stats.Window
	Duration    time.Duration
	// Servers describes the server overlay, e.g. "MaxConnectionAge 10s".
	Servers string
	// Cluster is the scenario's cluster settings with the variant's overlay.
	Cluster ClusterSettings
}

// ClientPlan is one load client.
type ClientPlan struct {
	Name, Group string
	Target      Target
	Policy      string
	Rate        float64
	Timeout     time.Duration
	Settings    ClientSettings
}

// Plans returns one plan per variant (or one "base" plan without variants),
// each with its own deep copy of the objects.
func (f *File) Plans() []Plan {
	sp := f.Scenario.Spec
	variants := sp.Variants
	if len(variants) == 0 {
		variants = []Variant{{Name: "base"}}
	}
	windows := []stats.Window{{Name: "run", From: 0, To: sp.Duration.Duration}}
	if len(sp.Windows) > 0 {
		windows = nil
		for _, w := range sp.Windows {
			windows = append(windows, stats.Window{Name: w.Name, From: w.From.Duration, To: w.To.Duration})
		}
	}
	var plans []Plan
	for i, v := range variants {
		p := Plan{Name: v.Name, Description: v.Description, Index: i, Steps: sp.Timeline, Windows: windows, Duration: sp.Duration.Duration}
		for _, o := range f.Objects {
			p.Objects = append(p.Objects, o.Obj.DeepCopyObject())
		}
		p.Servers = f.applyServers(p.Objects, v.Servers)
		p.Clients = f.clients(v.Clients)
		p.Cluster = sp.Cluster.overlay(v.Cluster)
		plans = append(plans, p)
	}
	return plans
}

func (f *File) clients(overlays []ClientOverlay) []ClientPlan {
	var out []ClientPlan
	for _, c := range f.Scenario.Spec.Clients {
		target, policy, count, rate, settings := c.Target, c.Policy, countOf(c.Count), c.Rate, c.ClientSettings
		for _, o := range overlays {
			if o.Name == "" || o.Name == c.Name {
				target = cmp.Or(o.Target, target)
				policy = cmp.Or(o.Policy, policy)
				if o.Count != nil {
					count = *o.Count
				}
				rate = cmp.Or(o.Rate, rate)
				settings = settings.overlay(o.ClientSettings)
			}
		}
		if policy == "" {
			policy = "pick_first"
		}
		t, _ := f.resolveTarget(target, c.Namespace) // checked by Load
		timeout := c.Timeout.Duration
		if timeout == 0 {
			timeout = time.Second
		}
		for n := range count {
			out = append(out, ClientPlan{Name: fmt.Sprintf("%s-%d", c.Name, n), Group: c.Name, Target: t, Policy: policy, Rate: rate, Timeout: timeout, Settings: settings})
		}
	}
	return out
}

// applyServers rewrites the container args of overlaid workloads and
// returns a description of the overlay.
func (f *File) applyServers(objs []runtime.Object, overlays []ServerOverlay) string {
	var desc []string
	for _, o := range overlays {
		target, _ := f.overlayTarget(o) // checked by Load
		for _, obj := range objs {
			w, ok := asWorkload(obj)
			if !ok || w.Kind != target.Kind || w.Name != target.Name || w.Namespace != target.Namespace {
				continue
			}
			if o.MinReadySeconds != nil {
				switch x := obj.(type) {
				case *appsv1.Deployment:
					x.Spec.MinReadySeconds = *o.MinReadySeconds
				case *appsv1.StatefulSet:
					x.Spec.MinReadySeconds = *o.MinReadySeconds
				}
			}
			for i := range w.Template.Spec.Containers {
				c := &w.Template.Spec.Containers[i]
				if !kubelet.IsPinlabImage(c.Image) {
					continue
				}
				if o.MaxConnectionAge != nil {
					c.Args = setFlag(c.Args, "--max-connection-age", o.MaxConnectionAge.Duration.String())
				}
				if o.MaxConnectionAgeGrace != nil {
					c.Args = setFlag(c.Args, "--max-connection-age-grace", o.MaxConnectionAgeGrace.Duration.String())
				}
				if o.PreStopSleepSeconds != nil {
					if c.Lifecycle == nil {
						c.Lifecycle = &corev1.Lifecycle{}
					}
					c.Lifecycle.PreStop = &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: *o.PreStopSleepSeconds}}
				}
			}
		}
		if o.MaxConnectionAge != nil {
			desc = append(desc, fmt.Sprintf("%s: MaxConnectionAge %v", target.Name, o.MaxConnectionAge.Duration))
		}
		if o.MaxConnectionAgeGrace != nil {
			desc = append(desc, fmt.Sprintf("grace %v", o.MaxConnectionAgeGrace.Duration))
		}
		if o.MinReadySeconds != nil {
			desc = append(desc, fmt.Sprintf("%s: minReadySeconds %d", target.Name, *o.MinReadySeconds))
		}
		if o.PreStopSleepSeconds != nil {
			desc = append(desc, fmt.Sprintf("%s: preStop sleep %ds", target.Name, *o.PreStopSleepSeconds))
		}
	}
	return strings.Join(desc, ", ")
}

// setFlag replaces every "--name=v" or "--name v" in args with "--name=value".
func setFlag(args []string, name, value string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == name:
			i++ // drop the separate value too
		case strings.HasPrefix(args[i], name+"="):
		default:
			out = append(out, args[i])
		}
	}
	return append(out, name+"="+value)
}

// tracksPod reports whether the run measures pod p: the pods selected by a
// client group's target Service (other workloads of the file are not
// counted in shares and fairness). With no selector among the targets
// (hand-written EndpointSlices), every pod is.
func (p Plan) tracksPod(pod *corev1.Pod) bool {
	selectors := 0
	for _, c := range p.Clients {
		sel := c.Target.Service.Spec.Selector
		if len(sel) == 0 {
			continue
		}
		selectors++
		if pod.Namespace == c.Target.Namespace && labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels)) {
			return true
		}
	}
	return selectors == 0
}

// groups describes the plan's client groups, in order.
func (p Plan) groups() []report.Group {
	var out []report.Group
	for _, c := range p.Clients {
		if n := len(out); n > 0 && out[n-1].Name == c.Group {
			out[n-1].Clients++
			continue
		}
		kind := "ClusterIP"
		if c.Target.Headless() {
			kind = "headless"
		}
		path, policy := "direct", c.Policy
		if x := c.Settings.L7Proxy; x != nil {
			path, policy = "L7 "+cmp.Or(x.Placement, "sidecar"), cmp.Or(x.Policy, "round_robin")+" per call"
		}
		switch c.Settings.Protocol {
		case "http":
			idle := 2
			if v := c.Settings.MaxIdleConnsPerHost; v != nil {
				idle = *v
			}
			policy = fmt.Sprintf("HTTP/1.1 keep-alive pool (MaxIdleConnsPerHost %d)", idle)
		case "websocket":
			policy = "one WebSocket"
		}
		out = append(out, report.Group{Name: c.Group, Clients: 1, Target: fmt.Sprintf("%s:%d", c.Target.Host, c.Target.Port),
			ServiceKind: kind, Policy: policy, Rate: c.Rate, Settings: strings.Join(c.Settings.describe(), ", "), Path: path})
	}
	return out
}
