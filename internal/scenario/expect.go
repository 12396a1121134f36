package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
	"google.golang.org/grpc/codes"
)

// expectation is a checked expectation and the variants it applies to
// (nil: all).
type expectation struct {
	plan.Expectation
	variants []string
}

// expectations checks spec.expect against the windows, variants, groups
// and steps.
func (pl *planner) expectations(windows []stats.Window) ([]expectation, error) {
	var out []expectation
	for i, e := range pl.sp.Expect {
		s := at(pl.doc, fmt.Sprintf("spec.expect[%d]", i))
		x, err := pl.expectation(s, e, windows)
		if err != nil {
			return nil, err
		}
		out = append(out, expectation{Expectation: x, variants: e.Variants})
	}
	return out, nil
}

func (pl *planner) expectation(s site, e Expectation, windows []stats.Window) (plan.Expectation, error) {
	x := plan.Expectation{Name: e.Name, Metric: e.Metric, Window: e.Window, Group: e.Group, Pod: e.Pod, Code: e.Code, Cause: e.Cause, AtLeast: e.AtLeast, AtMost: e.AtMost}
	if strings.TrimSpace(e.Name) == "" {
		return x, s.Errorf("name", "required: say what is expected")
	}
	m, ok := plan.Metrics[e.Metric]
	if !ok {
		return x, s.Errorf("metric", "%q: expected one of %s", e.Metric, plan.MetricNames())
	}
	if e.AtLeast == nil && e.AtMost == nil {
		return x, s.Errorf("", "set atLeast, atMost or both")
	}
	if e.AtLeast != nil && e.AtMost != nil && *e.AtLeast > *e.AtMost {
		return x, s.Errorf("", "atLeast %v is above atMost %v", *e.AtLeast, *e.AtMost)
	}
	if m.Unit {
		for _, b := range []*float64{e.AtLeast, e.AtMost} {
			if b != nil && (*b < 0 || *b > 1) {
				return x, s.Errorf("", "metric %s is between 0 and 1; got bound %v", e.Metric, *b)
			}
		}
	}
	if err := checkWindow(s, e, m, windows); err != nil {
		return x, err
	}
	if e.Group != "" && !pl.hasGroup(e.Group) {
		return x, s.Errorf("group", "%q names no client group", e.Group)
	}
	if e.Group != "" && !m.Window && e.Window == "" {
		return x, s.Errorf("group", "metric %s is over the whole run and every group; remove group", e.Metric)
	}
	if err := pl.checkPod(s, e, m, &x); err != nil {
		return x, err
	}
	if err := checkNarrowing(s, e, m); err != nil {
		return x, err
	}
	for j, v := range e.Variants {
		if !pl.hasVariant(v) {
			return x, s.Errorf(fmt.Sprintf("variants[%d]", j), "%q names no variant", v)
		}
	}
	return x, nil
}

func checkWindow(s site, e Expectation, m plan.MetricSpec, windows []stats.Window) error {
	named := slices.ContainsFunc(windows, func(w stats.Window) bool { return w.Name == e.Window })
	switch {
	case m.Window && e.Window == "":
		return s.Errorf("window", "metric %s is measured in a window; name one of spec.windows", e.Metric)
	case e.Window != "" && !named:
		var names []string
		for _, w := range windows {
			names = append(names, w.Name)
		}
		return s.Errorf("window", "%q names no window (windows: %s)", e.Window, strings.Join(names, ", "))
	case e.Window != "" && !m.Window && !m.WindowOptional:
		return s.Errorf("window", "metric %s is over the whole run; remove window", e.Metric)
	}
	return nil
}

// checkPod checks the pod of a pod metric: a StatefulSet pod's name, or
// "@<step>" for the pod a pod step acted on.
func (pl *planner) checkPod(s site, e Expectation, m plan.MetricSpec, x *plan.Expectation) error {
	switch {
	case m.Pod && e.Pod == "":
		return s.Errorf("pod", "metric %s needs a pod: a pod name or @<step name>", e.Metric)
	case !m.Pod && e.Pod != "":
		return s.Errorf("pod", "metric %s is not about one pod; remove pod", e.Metric)
	case strings.HasPrefix(e.Pod, "@"):
		name := e.Pod[1:]
		j := slices.IndexFunc(pl.sp.Timeline, func(st Step) bool { return st.Name == name })
		if j < 0 {
			return s.Errorf("pod", "%q: no timeline step is named %q", e.Pod, name)
		}
		if !pl.sp.Timeline[j].kinds()[0].pod {
			return s.Errorf("pod", "%q: step %q does not act on a pod", e.Pod, name)
		}
		x.Pod, x.StepPod = "", name
	case e.Pod != "":
		if _, ok := pl.base.podMayExist(e.Pod, ""); !ok {
			return s.Errorf("pod", "%q: expected @<step name> (the pod a step acted on) or the name of a StatefulSet pod (<set>-<ordinal>); other pods' names are random", e.Pod)
		}
	}
	return nil
}

func checkNarrowing(s site, e Expectation, m plan.MetricSpec) error {
	if e.Code == "" && e.Cause == "" {
		return nil
	}
	if !m.Narrowable {
		return s.Errorf("", "code and cause narrow only the failed and failedShare metrics")
	}
	if e.Code != "" && e.Cause != "" {
		return s.Errorf("", "set code or cause, not both")
	}
	if e.Code != "" && statusCodes[e.Code] == codes.OK {
		return s.Errorf("code", "%q: expected a gRPC status code name such as Unavailable or DeadlineExceeded", e.Code)
	}
	if e.Cause != "" && !slices.Contains(plan.Causes, plan.Cause(e.Cause)) {
		var names []string
		for _, c := range plan.Causes {
			names = append(names, string(c))
		}
		return s.Errorf("cause", "%q: expected one of %s", e.Cause, strings.Join(names, ", "))
	}
	return nil
}

func (pl *planner) hasVariant(name string) bool {
	if len(pl.sp.Variants) == 0 {
		return name == defaultVariantName
	}
	return slices.ContainsFunc(pl.sp.Variants, func(v Variant) bool { return v.Name == name })
}

// forVariant returns the expectations that apply to variant name.
func forVariant(es []expectation, name string) []plan.Expectation {
	var out []plan.Expectation
	for _, e := range es {
		if len(e.variants) == 0 || slices.Contains(e.variants, name) {
			out = append(out, e.Expectation)
		}
	}
	return out
}
