package plan

import (
	"slices"
	"strings"
)

// Expectation is a bound on one measured value, checked per variant.
type Expectation struct {
	// Name says what is expected; it heads the pass/fail line.
	Name string
	// Metric is one of Metrics.
	Metric string
	// Window names the window of a window metric (for failed and
	// failedShare it is optional: empty means the whole run).
	Window string
	// Group narrows a window metric to one client group's pods and calls
	// (Summary.Groups); empty is every group together.
	Group string
	// Pod names the pod of a pod metric; StepPod, when set instead, names
	// the step whose pod it is (the file's "@<step name>").
	Pod, StepPod string
	// Code and Cause narrow failed and failedShare to one status code or
	// cause.
	Code, Cause string
	// AtLeast and AtMost bound the value; at least one is set.
	AtLeast, AtMost *float64
}

// MetricSpec describes a metric expectations can bound.
type MetricSpec struct {
	// Window is true for a value measured in a window; Pod for a value
	// about one pod; Unit for a value between 0 and 1; Narrowable for one
	// that code and cause narrow. WindowOptional means a window may be
	// named but need not be. Timing marks a value that an overloaded
	// machine changes (failures by deadline, latency, how many calls were
	// sent): its check is invalid where the load generator could not keep
	// its schedule. OverloadRaises marks a timing value an overloaded
	// machine can only raise, never lower (every call due is either sent
	// or counted failed as not sent, and a late call is only slower): an
	// upper bound it meets, or a lower bound it misses, holds even there.
	Window, WindowOptional, Pod, Unit, Narrowable, Timing, OverloadRaises bool
	Doc                                                                   string
}

// Metrics are the values expectations can bound, by name. Package verdict
// measures each.
var Metrics = map[string]MetricSpec{
	"jain":                 {Window: true, Unit: true, Doc: "Jain's fairness index over the pods' calls"},
	"idlePods":             {Window: true, Doc: "pods with less than a tenth of a fair share"},
	"addedShare":           {Window: true, Unit: true, Doc: "share of calls served by pods that turned Ready during the run"},
	"calls":                {Timing: true, Window: true, Doc: "calls the pods served"},
	"podsServing":          {Window: true, Doc: "pods that served at least one call"},
	"maxPodsPerClient":     {Window: true, Doc: "the most pods any one client's calls reached"},
	"failed":               {Timing: true, OverloadRaises: true, WindowOptional: true, Narrowable: true, Doc: "failed calls (by client), in a window or the whole run; code and cause narrow it"},
	"failedShare":          {Timing: true, OverloadRaises: true, WindowOptional: true, Narrowable: true, Unit: true, Doc: "failed calls over all calls the clients finished, in a window or the whole run"},
	"connsOpenedPerSecond": {Window: true, Doc: "client connections opened per second (reconnects)"},
	"connsPerClient":       {Window: true, Doc: "time-averaged open connections per client"},
	"latencyP50Ms":         {Timing: true, OverloadRaises: true, Window: true, Doc: "median call latency in ms"},
	"latencyP99Ms":         {Timing: true, OverloadRaises: true, Window: true, Doc: "99th percentile call latency in ms"},
	"podCalls":             {Timing: true, Window: true, Pod: true, Doc: "calls one pod served"},
	"podShare":             {Window: true, Pod: true, Unit: true, Doc: "one pod's share of the calls"},
	"errorWindowSeconds":   {Timing: true, Doc: "total length of the run's error windows in seconds"},
	"errorWindows":         {Timing: true, Doc: "number of error windows"},
	"rebalanceSeconds":     {Timing: true, Doc: "time to rebalance: from a pod turning Ready to its share reaching 90% of fair, the longest over pods added during the run (infinite if one never did)"},
}

// MetricNames lists Metrics' names, sorted and comma-separated.
func MetricNames() string {
	var names []string
	for n := range Metrics {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
