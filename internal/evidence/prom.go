package evidence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// PrometheusTimeout bounds each query.
const PrometheusTimeout = 10 * time.Second

// Prometheus takes per-pod call counts from a Prometheus server that
// scrapes the pods' gRPC metrics, of one of the families FamilyNames
// lists, with the target labels `pinlab lab targets` gives (and common
// Kubernetes relabelling keeps): namespace and pod. The health and
// channelz services' calls (probes, diagnose's own sampling) are left
// out where the family labels the service. The server is queried
// wherever its URL says.
type Prometheus struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:9090" or
	// "https://prometheus.example.com/prom".
	URL string
	// Family names the metric family (see FamilyNames). Empty means
	// go-grpc, grpc-ecosystem's grpc_server_started_total and
	// grpc_server_handled_total, the only one before there were
	// families; AutoFamily tries each family's series query in turn and
	// takes the first that finds the pods, and Calls says which.
	Family string
	// NamespaceLabel and PodLabel name the target labels; empty means
	// "namespace" and "pod".
	NamespaceLabel, PodLabel string
}

func (p *Prometheus) targets() targets {
	return targets{namespace: cmp.Or(p.NamespaceLabel, "namespace"), pod: cmp.Or(p.PodLabel, "pod")}
}

// Queries returns the PromQL queries for the calls started and failed by
// pods of namespace over the window ending at the query time, in p's
// family; empty with AutoFamily, whose family Calls picks, or an unknown
// one.
func (p *Prometheus) Queries(namespace string, pods []string, window time.Duration) (started, failed string) {
	f := family(p.Family)
	if f == nil {
		return "", ""
	}
	return f.queries(p.targets(), namespace, pods, window)
}

// Calls runs Queries at now and returns the calls of each pod that has
// series (zero, when another pod has a row, for a pod scraped twice in
// the window whose series are all of the services left out), rounded to
// whole calls (Prometheus extrapolates increase() to
// the window's edges), and the queries run. With AutoFamily it first
// runs the families' series queries, in turn, until one finds the pods,
// and ends the started query with a PromQL comment naming that family;
// when none does, the error names the families and labels tried. Errors
// name the server and say whether it could not be reached, answered an
// error (a bad query, say), or timed out (PrometheusTimeout per query).
func (p *Prometheus) Calls(ctx context.Context, namespace string, pods []string, window time.Duration) (map[string]Calls, []string, error) {
	api, err := p.api()
	if err != nil {
		return nil, nil, err
	}
	f, queries, err := p.pick(ctx, api, namespace, pods)
	if err != nil {
		return nil, queries, err
	}
	started, failed := f.queries(p.targets(), namespace, pods, window)
	if p.Family == AutoFamily {
		started += fmt.Sprintf(" # %s: the first family with series (%s)", f.Name, tried(f))
	}
	queries = append(queries, started, failed)
	s, err := p.increase(ctx, api, started)
	if err != nil {
		return nil, queries, err
	}
	fl, err := p.increase(ctx, api, failed)
	if err != nil {
		return nil, queries, err
	}
	calls := tally(s, fl)
	if len(calls) > 0 && len(calls) < len(pods) {
		// A pod whose only series are of the services left out (the
		// kubelet's health probes) has no row in the sums: it served no
		// client call, as OpenTelemetry's exporters show a pod that
		// no client called (they have no zero series, unlike
		// grpc-ecosystem's InitializeMetrics). Some pod's row says the
		// window holds two scrapes.
		q := f.servedQuery(p.targets(), namespace, pods, window)
		queries = append(queries, q)
		vec, err := p.query(ctx, api, q)
		if err != nil {
			return nil, queries, err
		}
		for _, sm := range vec {
			name := string(sm.Metric[model.LabelName(p.targets().pod)])
			if _, ok := calls[name]; !ok && name != "" {
				calls[name] = Calls{}
			}
		}
	}
	return calls, queries, nil
}

// tally returns the calls of each pod from those started and failed.
func tally(started, failed map[string]int64) map[string]Calls {
	out := map[string]Calls{}
	for name, n := range started {
		out[name] = Calls{Started: n}
	}
	for name, n := range failed {
		c := out[name]
		c.Failed = n
		out[name] = c
	}
	for name, c := range out {
		c.Succeeded = max(0, c.Started-c.Failed)
		out[name] = c
	}
	return out
}

// pick returns p's family and, with AutoFamily, the first whose series
// query finds any of pods, with the queries it ran.
func (p *Prometheus) pick(ctx context.Context, api promv1.API, namespace string, pods []string) (*Family, []string, error) {
	if p.Family != AutoFamily {
		return family(p.Family), nil, nil
	}
	var queries []string
	for i := range families {
		q := families[i].seriesQuery(p.targets(), namespace, pods)
		queries = append(queries, q)
		vec, err := p.query(ctx, api, q)
		if err != nil {
			return nil, queries, err
		}
		if len(vec) > 0 {
			return &families[i], queries, nil
		}
	}
	return nil, queries, p.noFamily(namespace, len(pods))
}

// tried names the families AutoFamily tried up to f.
func tried(f *Family) string {
	var names []string
	for _, g := range families {
		names = append(names, g.Name)
		if g.Name == f.Name {
			break
		}
	}
	return "tried " + strings.Join(names, ", ")
}

// noFamily says that no family has series for the pods, and which
// families and labels were tried.
func (p *Prometheus) noFamily(namespace string, pods int) error {
	var tried []string
	for i := range families {
		tried = append(tried, fmt.Sprintf("%s (%s)", families[i].Name, families[i].metrics()))
	}
	t := p.targets()
	return fmt.Errorf("prometheus %s has no series of any metric family for the %d pods of namespace %s by target labels %s and %s: tried %s (is it scraping them, with those labels? see pinlab lab targets)",
		p.URL, pods, namespace, t.namespace, t.pod, strings.Join(tried, ", "))
}

// increase runs q, a sum of increase() by pod, and returns each pod's
// value rounded, refusing what no counter's increase can be.
func (p *Prometheus) increase(ctx context.Context, api promv1.API, q string) (map[string]int64, error) {
	vec, err := p.query(ctx, api, q)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, s := range vec {
		name := string(s.Metric[model.LabelName(p.targets().pod)])
		f := float64(s.Value)
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxIncrease {
			// increase() of a counter is finite and never negative:
			// this is not a counter's (or not a real Prometheus).
			return nil, fmt.Errorf("prometheus %s: %s: pod %q has %v, not a counter's increase", p.URL, q, name, f)
		}
		out[name] = int64(math.Round(f))
	}
	return out, nil
}

// maxIncrease bounds a plausible increase of a call counter over a window
// (10 minutes at most): 10^12 calls.
const maxIncrease = 1e12

// SeriesQuery returns the instant query that counts, by pod, the series
// of p's family (with AutoFamily: of any family) of pods of namespace,
// whatever their samples' age: whether Prometheus scrapes the pods at
// all. Empty for an unknown family.
func (p *Prometheus) SeriesQuery(namespace string, pods []string) string {
	if p.Family == AutoFamily {
		qs := make([]string, len(families))
		for i := range families {
			qs[i] = families[i].seriesQuery(p.targets(), namespace, pods)
		}
		return strings.Join(qs, " or ")
	}
	f := family(p.Family)
	if f == nil {
		return ""
	}
	return f.seriesQuery(p.targets(), namespace, pods)
}

// Series runs SeriesQuery and returns how many of pods have series.
// Errors are as Calls's.
func (p *Prometheus) Series(ctx context.Context, namespace string, pods []string) (int, error) {
	api, err := p.api()
	if err != nil {
		return 0, err
	}
	vec, err := p.query(ctx, api, p.SeriesQuery(namespace, pods))
	return len(vec), err
}

// api checks p and returns its server's API.
func (p *Prometheus) api() (promv1.API, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	client, err := promapi.NewClient(promapi.Config{Address: p.URL, Client: &http.Client{Timeout: PrometheusTimeout}})
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", p.URL, err)
	}
	return promv1.NewAPI(client), nil
}

// query runs the instant query q at now, within PrometheusTimeout, and
// returns its vector.
func (p *Prometheus) query(ctx context.Context, api promv1.API, q string) (model.Vector, error) {
	qctx, cancel := context.WithTimeout(ctx, PrometheusTimeout)
	defer cancel()
	v, _, _, err := api.Query(qctx, q, time.Now())
	if err != nil {
		return nil, p.queryError(err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("prometheus %s: %s: want a vector, got %s", p.URL, q, v.Type())
	}
	return vec, nil
}

// Check refuses a URL that is not http(s)://HOST[:PORT][/PATH], HOST a
// name (localhost included) or an IP (the server is wherever the user
// says), an unknown Family (see CheckFamily), and target labels that are
// not label names. It does no I/O.
func (p *Prometheus) Check() error {
	u, err := url.Parse(p.URL)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "":
		return fmt.Errorf("prometheus: %q is not an http:// or https:// URL", p.URL)
	case u.User != nil:
		return fmt.Errorf("prometheus: %s://%s: a user and password in the URL would be printed with it; give a URL without them", u.Scheme, u.Host)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("prometheus: %q: give the base URL, without a query or fragment", p.URL)
	}
	if err := CheckFamily(p.Family); err != nil {
		return err
	}
	for _, l := range []string{p.NamespaceLabel, p.PodLabel} {
		if l == "" {
			continue
		}
		if err := checkLabel(l); err != nil {
			return err
		}
	}
	return nil
}
func (p *Prometheus) queryError(err error) error {
	var perr *promv1.Error
	var nerr net.Error
	switch {
	case errors.As(err, &perr) && perr.Type == promv1.ErrBadData:
		return fmt.Errorf("prometheus %s refused the query: %s", p.URL, perr.Msg)
	case errors.As(err, &nerr) && nerr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("prometheus %s did not answer within %v: %w", p.URL, PrometheusTimeout, err)
	case errors.As(err, &perr):
		return fmt.Errorf("prometheus %s: %s: %s", p.URL, perr.Type, perr.Msg)
	}
	return fmt.Errorf("prometheus %s could not be reached: %w", p.URL, err)
}

// metricWhat names, for messages, what p counts calls by: its family's
// started counters, or "any metric family's counters" when it picks one.
func (p *Prometheus) metricWhat() string {
	if f := family(p.Family); f != nil {
		return f.metrics()
	}
	return "any metric family's counters"
}

// labelsWhat names p's target labels, for messages.
func (p *Prometheus) labelsWhat() string {
	t := p.targets()
	return t.namespace + " and " + t.pod + " labels"
}
