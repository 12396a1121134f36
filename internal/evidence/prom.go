package evidence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// PrometheusTimeout bounds each query.
const PrometheusTimeout = 10 * time.Second

// Prometheus takes per-pod call counts from a Prometheus server that
// scrapes the pods' grpc-ecosystem metrics (grpc_server_started_total and
// grpc_server_handled_total), with the target labels `pinlab lab targets`
// gives (and common Kubernetes relabelling keeps): namespace and pod. The
// health and channelz services' calls (probes, diagnose's own sampling)
// are left out. The server is queried wherever its URL says.
type Prometheus struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:9090" or
	// "https://prometheus.example.com/prom".
	URL string
	// NamespaceLabel and PodLabel name the target labels; empty means
	// "namespace" and "pod".
	NamespaceLabel, PodLabel string
}

// excluded are the services whose calls are not the workload's.
const excluded = "grpc.health.v1.Health|grpc.channelz.v1.Channelz"

// Queries returns the PromQL queries for the calls started and failed by
// pods of namespace over the window ending at the query time.
func (p *Prometheus) Queries(namespace string, pods []string, window time.Duration) (started, failed string) {
	ns, pod := cmpOr(p.NamespaceLabel, "namespace"), cmpOr(p.PodLabel, "pod")
	quoted := make([]string, len(pods))
	for i, name := range pods {
		quoted[i] = regexp.QuoteMeta(name)
	}
	sel := fmt.Sprintf(`%s=%q,%s=~%q,grpc_service!~%q`, ns, namespace, pod, strings.Join(quoted, "|"), excluded)
	w := model.Duration(window).String()
	started = fmt.Sprintf(`sum by (%s) (increase(grpc_server_started_total{%s}[%s]))`, pod, sel, w)
	failed = fmt.Sprintf(`sum by (%s) (increase(grpc_server_handled_total{%s,grpc_code!="OK"}[%s]))`, pod, sel, w)
	return started, failed
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Calls runs Queries at now and returns the calls of each pod that has
// series, rounded to whole calls (Prometheus extrapolates increase() to
// the window's edges), and the queries run. Errors name the server and
// say whether it could not be reached, answered an error (a bad query,
// say), or timed out (PrometheusTimeout per query).
func (p *Prometheus) Calls(ctx context.Context, namespace string, pods []string, window time.Duration) (map[string]Calls, []string, error) {
	if err := p.Check(); err != nil {
		return nil, nil, err
	}
	client, err := promapi.NewClient(promapi.Config{Address: p.URL, Client: &http.Client{Timeout: PrometheusTimeout}})
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus %s: %w", p.URL, err)
	}
	api := promv1.NewAPI(client)
	started, failed := p.Queries(namespace, pods, window)
	out := map[string]Calls{}
	for _, q := range []string{started, failed} {
		qctx, cancel := context.WithTimeout(ctx, PrometheusTimeout)
		v, _, _, err := api.Query(qctx, q, time.Now())
		cancel()
		if err != nil {
			return nil, []string{started, failed}, p.queryError(err)
		}
		vec, ok := v.(model.Vector)
		if !ok {
			return nil, []string{started, failed}, fmt.Errorf("prometheus %s: %s: want a vector, got %s", p.URL, q, v.Type())
		}
		for _, s := range vec {
			name := string(s.Metric[model.LabelName(cmpOr(p.PodLabel, "pod"))])
			c := out[name]
			f := float64(s.Value)
			if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxIncrease {
				// increase() of a counter is finite and never negative:
				// this is not a counter's (or not a real Prometheus).
				return nil, []string{started, failed}, fmt.Errorf("prometheus %s: %s: pod %q has %v, not a counter's increase", p.URL, q, name, f)
			}
			n := int64(math.Round(f))
			if q == started {
				c.Started = n
			} else {
				c.Failed = n
			}
			out[name] = c
		}
	}
	for name, c := range out {
		c.Succeeded = max(0, c.Started-c.Failed)
		out[name] = c
	}
	return out, []string{started, failed}, nil
}

// maxIncrease bounds a plausible increase of a call counter over a window
// (10 minutes at most): 10^12 calls.
const maxIncrease = 1e12

// SeriesQuery returns the instant query that counts, by pod, the
// grpc_server_started_total series of pods of namespace, whatever their
// samples' age: whether Prometheus scrapes the pods at all.
func (p *Prometheus) SeriesQuery(namespace string, pods []string) string {
	started, _ := p.Queries(namespace, pods, time.Minute)
	sel := started[strings.Index(started, "{") : strings.LastIndex(started, "}")+1]
	return fmt.Sprintf(`count by (%s) (last_over_time(grpc_server_started_total%s[5m]))`, cmpOr(p.PodLabel, "pod"), sel)
}

// Series runs SeriesQuery and returns how many of pods have series.
// Errors are as Calls's.
func (p *Prometheus) Series(ctx context.Context, namespace string, pods []string) (int, error) {
	if err := p.Check(); err != nil {
		return 0, err
	}
	client, err := promapi.NewClient(promapi.Config{Address: p.URL, Client: &http.Client{Timeout: PrometheusTimeout}})
	if err != nil {
		return 0, fmt.Errorf("prometheus %s: %w", p.URL, err)
	}
	qctx, cancel := context.WithTimeout(ctx, PrometheusTimeout)
	defer cancel()
	v, _, _, err := promv1.NewAPI(client).Query(qctx, p.SeriesQuery(namespace, pods), time.Now())
	if err != nil {
		return 0, p.queryError(err)
	}
	vec, _ := v.(model.Vector)
	return len(vec), nil
}

// Check refuses a URL that is not http(s)://HOST[:PORT][/PATH], HOST a
// name (localhost included) or an IP; the server is wherever the user
// says. It does no I/O.
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
