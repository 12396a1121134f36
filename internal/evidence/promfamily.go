package evidence

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// AutoFamily is the Prometheus.Family that tries each family's series
// query, in the order of FamilyNames, and takes the first that finds
// series of the pods.
const AutoFamily = "auto"

// Family is one way a gRPC server's calls reach Prometheus: counters of
// the calls each pod started and failed, as one library (or proxy)
// exports them. Its queries pick the pods by the scrape target's labels
// (Prometheus.NamespaceLabel and PodLabel), which every family shares:
// `pinlab lab targets`, Istio's and Linkerd's Prometheus configurations
// all set namespace and pod.
type Family struct {
	// Name is what Prometheus.Family and --prometheus-family call it.
	Name string
	// Instruments are the exporters whose counters the family reads, in
	// order: each pod's calls come from the first one with series for it
	// (PromQL's `or`), never from two added up.
	Instruments []Instrument
}

// Instrument is the counters one exporter gives a Family, as the metric
// and label names they have in Prometheus.
type Instrument struct {
	// Started counts the calls started or, where the exporter counts
	// only calls that ended (histograms' _count), the calls ended.
	Started string
	// Failed counts the calls ended; those matching FailedMatch failed.
	Failed, FailedMatch string
	// Match, if not empty, selects the series of the pod's own gRPC
	// calls among the metric's, e.g. `direction="inbound"`.
	Match string
	// ServiceLabel, if not empty, names each call's gRPC service (with
	// MethodLabel: "service/method"), so that the calls of Excluded
	// services (probes, diagnose's own channelz reads) are left out.
	// Empty: the exporter does not say, and those calls count.
	ServiceLabel string
	MethodLabel  bool
	// Excluded is the services left out, a regexp alternation.
	Excluded string
	// Series and SeriesMatch, if not empty, are the metric and matchers
	// whose series show that Prometheus has this exporter's counters of
	// a pod, where Started's would not tell it from another family's.
	Series, SeriesMatch string
}

// excluded are the services whose calls are not the workload's: gRPC
// health (what kubelet's gRPC probes call) and channelz. The go-grpc
// family keeps this list, as before there were families, so that its
// queries stay what they were; the others also leave out reflection.
const excluded = "grpc.health.v1.Health|grpc.channelz.v1.Channelz"

// excludedReflection is excluded and both versions of server reflection
// (grpcurl's list and describe).
const excludedReflection = excluded + "|grpc.reflection.v1.ServerReflection|grpc.reflection.v1alpha.ServerReflection"

// families are the known families, in the order AutoFamily tries them.
var families = []Family{
	// grpc-java: me.dinowernli java-grpc-prometheus (grpc-ecosystem/java-grpc-prometheus,
	// src/main/java/me/dinowernli/grpc/prometheus/ServerMetrics.java): the
	// same names and grpc_service as go-grpc, but the code in `code`
	// (io.grpc.Status.Code names: OK, UNAVAILABLE), and only in `code`
	// before it added grpc_code. Tried before go-grpc, with `code` as the
	// tell, since go-grpc's failed query would count all of its calls.
	{Name: "grpc-java", Instruments: []Instrument{{
		Started: "grpc_server_started_total", Failed: "grpc_server_handled_total", FailedMatch: `code!="OK"`,
		ServiceLabel: "grpc_service", Excluded: excludedReflection,
		Series: "grpc_server_handled_total", SeriesMatch: `code!=""`,
	}}},
	// go-grpc: go-grpc-middleware providers/prometheus (server_metrics.go):
	// grpc_server_started_total{grpc_type,grpc_service,grpc_method} and
	// grpc_server_handled_total{...,grpc_code}, the codes as codes.Code's
	// String (OK, Unavailable).
	{Name: "go-grpc", Instruments: []Instrument{{
		Started: "grpc_server_started_total", Failed: "grpc_server_handled_total", FailedMatch: `grpc_code!="OK"`,
		ServiceLabel: "grpc_service", Excluded: excluded,
	}}},
	// otel: OpenTelemetry's names, as OTel's Prometheus compatibility spec
	// maps them (dots to _, units as suffixes, {call} dropped, _total on
	// counters, _count of histograms).
	{Name: "otel", Instruments: []Instrument{
		// grpc-go stats/opentelemetry (server_metrics.go, gRFC A66):
		// grpc.server.call.started{grpc.method} and grpc.server.call.duration
		// (s){grpc.method,grpc.status}, the method "service/method" (or
		// "other"), the status codes.Code's canonical name (OK, UNAVAILABLE).
		{Started: "grpc_server_call_started_total", Failed: "grpc_server_call_duration_seconds_count", FailedMatch: `grpc_status!="OK"`,
			ServiceLabel: "grpc_method", MethodLabel: true, Excluded: excludedReflection},
		// The OpenTelemetry Java agent's RpcServerMetrics, old semantic
		// conventions (its default): rpc.server.duration (ms)
		// {rpc.system,rpc.service,rpc.method,rpc.grpc.status_code}, the code
		// a number; only ended calls.
		{Started: "rpc_server_duration_milliseconds_count", Failed: "rpc_server_duration_milliseconds_count", FailedMatch: `rpc_grpc_status_code!="0"`,
			Match: `rpc_system="grpc"`, ServiceLabel: "rpc_service", Excluded: excludedReflection},
		// The same histogram in seconds, as Grafana Beyla exports it.
		{Started: "rpc_server_duration_seconds_count", Failed: "rpc_server_duration_seconds_count", FailedMatch: `rpc_grpc_status_code!="0"`,
			Match: `rpc_system="grpc"`, ServiceLabel: "rpc_service", Excluded: excludedReflection},
		// The Java agent with the stable RPC conventions opted in (the
		// semantic conventions' rpc-metrics): rpc.server.call.duration (s)
		// {rpc.system.name,rpc.method,rpc.response.status_code}, the method
		// "service/method", the status a code's name.
		{Started: "rpc_server_call_duration_seconds_count", Failed: "rpc_server_call_duration_seconds_count", FailedMatch: `rpc_response_status_code!="OK"`,
			Match: `rpc_system_name="grpc"`, ServiceLabel: "rpc_method", MethodLabel: true, Excluded: excludedReflection},
	}},
	// istio: Istio's standard metrics (istio.io, docs/reference/config/metrics):
	// istio_requests_total{reporter,request_protocol,grpc_response_status,...},
	// labelled by workload, not pod: the destination sidecar reports the
	// calls it passed to its pod, and the scrape target's pod label (the
	// sidecar's pod) says which pod. No service label: health checks count.
	{Name: "istio", Instruments: []Instrument{{
		Started: "istio_requests_total", Failed: "istio_requests_total", FailedMatch: `grpc_response_status!="0"`,
		Match: `reporter="destination",request_protocol="grpc"`,
	}}},
	// linkerd: linkerd2-proxy's metrics (linkerd.io reference/proxy-metrics):
	// request_total counted as each request starts, response_total as
	// each ends, classification "failure" by grpc-status when there is
	// one; direction "inbound" is the pod's own. No service label.
	{Name: "linkerd", Instruments: []Instrument{{
		Started: "request_total", Failed: "response_total", FailedMatch: `classification="failure"`,
		Match: `direction="inbound"`,
	}}},
}

// FamilyNames returns AutoFamily and the known families' names, in the
// order AutoFamily tries them.
func FamilyNames() []string {
	names := []string{AutoFamily}
	for _, f := range families {
		names = append(names, f.Name)
	}
	return names
}

// family returns the family named name ("" is go-grpc, the one before
// there were families), nil for AutoFamily or an unknown name.
func family(name string) *Family {
	name = cmp.Or(name, "go-grpc")
	for i := range families {
		if families[i].Name == name {
			return &families[i]
		}
	}
	return nil
}

// CheckFamily refuses a family name that is none of FamilyNames ("" is
// go-grpc).
func CheckFamily(name string) error {
	if name == AutoFamily || family(name) != nil {
		return nil
	}
	names := FamilyNames()
	return fmt.Errorf("prometheus: unknown metric family %q: want %s or %s", name, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// labelName is a Prometheus label name that needs no quoting.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// CheckTargetLabels refuses target label names by role other than
// namespace and pod, and values that are not Prometheus label names.
func CheckTargetLabels(labels map[string]string) error {
	for _, role := range slices.Sorted(maps.Keys(labels)) {
		if role != "namespace" && role != "pod" {
			return fmt.Errorf("prometheus: %s=%s: the target labels are namespace=LABEL and pod=LABEL", role, labels[role])
		}
		if err := checkLabel(labels[role]); err != nil {
			return err
		}
	}
	return nil
}

func checkLabel(name string) error {
	if !labelName.MatchString(name) {
		return fmt.Errorf("prometheus: target label %q: want a label name, letters, digits and _ (not first)", name)
	}
	return nil
}

// targets are the scrape target's label names that pick the pods.
type targets struct{ namespace, pod string }

// selector returns in's label matchers for pods of namespace.
func (in *Instrument) selector(t targets, namespace string, pods []string) string {
	sel := in.podSelector(t, namespace, pods)
	switch {
	case in.ServiceLabel != "" && in.MethodLabel:
		sel += fmt.Sprintf(`,%s!~%q`, in.ServiceLabel, "("+in.Excluded+")/.+")
	case in.ServiceLabel != "":
		sel += fmt.Sprintf(`,%s!~%q`, in.ServiceLabel, in.Excluded)
	}
	return sel
}

// podSelector is selector without the services left out: every series
// of the instrument for the pods.
func (in *Instrument) podSelector(t targets, namespace string, pods []string) string {
	quoted := make([]string, len(pods))
	for i, name := range pods {
		quoted[i] = regexp.QuoteMeta(name)
	}
	sel := fmt.Sprintf(`%s=%q,%s=~%q`, t.namespace, namespace, t.pod, strings.Join(quoted, "|"))
	if in.Match != "" {
		sel += "," + in.Match
	}
	return sel
}

// queries returns f's queries for the calls started and failed by pods
// of namespace over window: one sum by pod per instrument, joined by or.
func (f *Family) queries(t targets, namespace string, pods []string, window time.Duration) (started, failed string) {
	w := model.Duration(window).String()
	var s, fl []string
	for i := range f.Instruments {
		in := &f.Instruments[i]
		sel := in.selector(t, namespace, pods)
		s = append(s, fmt.Sprintf(`sum by (%s) (increase(%s{%s}[%s]))`, t.pod, in.Started, sel, w))
		fl = append(fl, fmt.Sprintf(`sum by (%s) (increase(%s{%s,%s}[%s]))`, t.pod, in.Failed, sel, in.FailedMatch, w))
	}
	return strings.Join(s, " or "), strings.Join(fl, " or ")
}

// seriesQuery returns the instant query that counts, by pod, f's series
// of pods of namespace over the last 5 minutes, whatever their samples'
// age: whether Prometheus has f's counters of the pods at all.
func (f *Family) seriesQuery(t targets, namespace string, pods []string) string {
	var qs []string
	for i := range f.Instruments {
		in := &f.Instruments[i]
		metric, sel := cmp.Or(in.Series, in.Started), in.selector(t, namespace, pods)
		if in.SeriesMatch != "" {
			sel += "," + in.SeriesMatch
		}
		qs = append(qs, fmt.Sprintf(`count by (%s) (last_over_time(%s{%s}[5m]))`, t.pod, metric, sel))
	}
	return strings.Join(qs, " or ")
}

// servedQuery returns the instant query that finds, by pod, the pods of
// namespace that Prometheus scraped at least twice in window (some series
// of f's started counters, the services left out included, has two
// samples there) and that have no series of a service counted: the pods
// that served only the services left out (the kubelet's health probes)
// through the window.
func (f *Family) servedQuery(t targets, namespace string, pods []string, window time.Duration) string {
	w := model.Duration(window).String()
	var scraped, counted []string
	for i := range f.Instruments {
		in := &f.Instruments[i]
		scraped = append(scraped, fmt.Sprintf(`count by (%s) (count_over_time(%s{%s}[%s]) >= 2)`, t.pod, in.Started, in.podSelector(t, namespace, pods), w))
		counted = append(counted, fmt.Sprintf(`count by (%s) (last_over_time(%s{%s}[%s]))`, t.pod, in.Started, in.selector(t, namespace, pods), w))
	}
	return fmt.Sprintf("(%s) unless on (%s) (%s)", strings.Join(scraped, " or "), t.pod, strings.Join(counted, " or "))
}

// metrics names f's started counters, for messages.
func (f *Family) metrics() string {
	var names []string
	for _, in := range f.Instruments {
		if !slices.Contains(names, cmp.Or(in.Series, in.Started)) {
			names = append(names, cmp.Or(in.Series, in.Started))
		}
	}
	return strings.Join(names, ", ")
}
