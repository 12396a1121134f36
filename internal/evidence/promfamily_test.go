package evidence_test

import (
	stdcmp "cmp"
	"context"
	"encoding/json"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// familyProm is a fake Prometheus HTTP API that has series of the
// metrics in have ("name", or "name:label,label" for series that also
// carry those labels) for every pod in values, labelled by podLabel.
// increase() queries of a metric in have give each pod's values[pod][0]
// (started), or values[pod][1] (failed) when the query has failedMatch;
// last_over_time queries give 1 per pod when a metric in have matches,
// with the labels that the query's `label!=""` matchers ask for. It
// records the queries.
type familyProm struct {
	have        []string
	failedMatch string
	podLabel    string
	values      map[string][2]string

	mu      sync.Mutex
	queries []string
}

func (f *familyProm) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		q := r.Form.Get("query")
		f.mu.Lock()
		f.queries = append(f.queries, q)
		f.mu.Unlock()
		result := []any{}
		for name, v := range f.values {
			value := f.answer(q, v)
			if value != "" {
				result = append(result, map[string]any{"metric": map[string]string{stdcmp.Or(f.podLabel, "pod"): name}, "value": []any{float64(time.Now().Unix()), value}})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// required are the labels a selector asks to be present.
var required = regexp.MustCompile(`[{,](\w+)!=""`)

func (f *familyProm) answer(q string, v [2]string) string {
	for _, h := range f.have {
		name, labels, _ := strings.Cut(h, ":")
		if sel, ok := selector(q, "last_over_time("+name+"{"); ok && carries(sel, strings.Split(labels, ",")) {
			return "1"
		}
		if strings.Contains(q, "increase("+name+"{") {
			if strings.Contains(q, f.failedMatch) {
				return v[1]
			}
			return v[0]
		}
	}
	return ""
}

// selector returns the label matchers after the first prefix in q.
func selector(q, prefix string) (string, bool) {
	_, after, ok := strings.Cut(q, prefix)
	sel, _, _ := strings.Cut(after, "}")
	return "{" + sel, ok
}

// carries reports whether series with labels satisfy sel's `label!=""`.
func carries(sel string, labels []string) bool {
	for _, m := range required.FindAllStringSubmatch(sel, -1) {
		if !slices.Contains(labels, m[1]) {
			return false
		}
	}
	return true
}

// TestPrometheusFamilies: for each family, with its series present, Calls
// gives each pod's started and failed calls as Prometheus answers them,
// by queries that name the family's metrics, the configured target
// labels, its failure filter and its exclusions.
func TestPrometheusFamilies(t *testing.T) {
	values := map[string][2]string{"pricing-0": {"120", "3"}, "pricing-1": {"0.4", ""}}
	want := map[string]evidence.Calls{"pricing-0": {Started: 120, Failed: 3, Succeeded: 117}, "pricing-1": {Started: 0}}
	tests := []struct {
		name, family, nsLabel, podLabel string
		have                            []string
		failedMatch                     string
		wantStarted, wantFailed         []string
	}{
		{name: "go-grpc", family: "go-grpc", have: []string{"grpc_server_started_total", "grpc_server_handled_total"}, failedMatch: `grpc_code!="OK"`,
			wantStarted: []string{`increase(grpc_server_started_total{namespace="shop",pod=~"pricing-0|pricing-1",grpc_service!~"grpc.health.v1.Health|grpc.channelz.v1.Channelz"}`},
			wantFailed:  []string{`grpc_server_handled_total{`, `grpc_code!="OK"`}},
		{name: "go-grpc by default", have: []string{"grpc_server_started_total", "grpc_server_handled_total"}, failedMatch: `grpc_code!="OK"`,
			wantStarted: []string{`sum by (pod) (increase(grpc_server_started_total{namespace="shop",pod=~"pricing-0|pricing-1",grpc_service!~"grpc.health.v1.Health|grpc.channelz.v1.Channelz"}[1m]))`},
			wantFailed:  []string{`sum by (pod) (increase(grpc_server_handled_total{namespace="shop",pod=~"pricing-0|pricing-1",grpc_service!~"grpc.health.v1.Health|grpc.channelz.v1.Channelz",grpc_code!="OK"}[1m]))`}},
		{name: "grpc-java", family: "grpc-java", nsLabel: "kubernetes_namespace", podLabel: "kubernetes_pod_name",
			have: []string{"grpc_server_started_total", "grpc_server_handled_total:code"}, failedMatch: `code!="OK"`,
			wantStarted: []string{`sum by (kubernetes_pod_name) (increase(grpc_server_started_total{kubernetes_namespace="shop",kubernetes_pod_name=~"pricing-0|pricing-1",`, `grpc_service!~"grpc.health.v1.Health|grpc.channelz.v1.Channelz|grpc.reflection.v1.ServerReflection|grpc.reflection.v1alpha.ServerReflection"`},
			wantFailed:  []string{`increase(grpc_server_handled_total{`, `,code!="OK"}`}},
		{name: "otel grpc-go", family: "otel", have: []string{"grpc_server_call_started_total", "grpc_server_call_duration_seconds_count"}, failedMatch: `grpc_status!="OK"`,
			wantStarted: []string{`increase(grpc_server_call_started_total{namespace="shop",pod=~"pricing-0|pricing-1",grpc_method!~"(grpc.health.v1.Health|grpc.channelz.v1.Channelz|grpc.reflection.v1.ServerReflection|grpc.reflection.v1alpha.ServerReflection)/.+"}`},
			wantFailed:  []string{`increase(grpc_server_call_duration_seconds_count{`, `grpc_status!="OK"`}},
		{name: "otel java agent", family: "otel", podLabel: "k8s_pod_name", have: []string{"rpc_server_duration_milliseconds_count"}, failedMatch: `rpc_grpc_status_code!="0"`,
			wantStarted: []string{`sum by (k8s_pod_name) (increase(rpc_server_duration_milliseconds_count{namespace="shop",k8s_pod_name=~"pricing-0|pricing-1",rpc_system="grpc",rpc_service!~"grpc.health.v1.Health|`, `rpc_server_duration_seconds_count{`, `rpc_server_call_duration_seconds_count{`},
			wantFailed:  []string{`rpc_grpc_status_code!="0"`, `rpc_response_status_code!="OK"`}},
		{name: "otel java agent, stable conventions", family: "otel", have: []string{"rpc_server_call_duration_seconds_count"}, failedMatch: `rpc_response_status_code!="OK"`,
			wantStarted: []string{`increase(rpc_server_call_duration_seconds_count{namespace="shop",pod=~"pricing-0|pricing-1",rpc_system_name="grpc",rpc_method!~"(grpc.health.v1.Health|`}},
		{name: "istio", family: "istio", have: []string{"istio_requests_total"}, failedMatch: `grpc_response_status!="0"`,
			wantStarted: []string{`sum by (pod) (increase(istio_requests_total{namespace="shop",pod=~"pricing-0|pricing-1",reporter="destination",request_protocol="grpc"}[1m]))`},
			wantFailed:  []string{`sum by (pod) (increase(istio_requests_total{namespace="shop",pod=~"pricing-0|pricing-1",reporter="destination",request_protocol="grpc",grpc_response_status!="0"}[1m]))`}},
		{name: "linkerd", family: "linkerd", have: []string{"request_total", "response_total"}, failedMatch: `classification="failure"`,
			wantStarted: []string{`sum by (pod) (increase(request_total{namespace="shop",pod=~"pricing-0|pricing-1",direction="inbound"}[1m]))`},
			wantFailed:  []string{`sum by (pod) (increase(response_total{namespace="shop",pod=~"pricing-0|pricing-1",direction="inbound",classification="failure"}[1m]))`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &familyProm{have: tt.have, failedMatch: tt.failedMatch, podLabel: tt.podLabel, values: values}
			p := &evidence.Prometheus{URL: fake.start(t), Family: tt.family, NamespaceLabel: tt.nsLabel, PodLabel: tt.podLabel}
			got, queries, err := p.Calls(context.Background(), "shop", []string{"pricing-0", "pricing-1"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if len(queries) != 2 || !slices.Equal(queries, fake.queries) {
				t.Fatalf("queries %q, ran %q; want the started and failed queries", queries, fake.queries)
			}
			for i, wants := range [][]string{tt.wantStarted, tt.wantFailed} {
				for _, w := range wants {
					if !strings.Contains(queries[i], w) {
						t.Errorf("query %q lacks %q", queries[i], w)
					}
				}
			}
			if strings.Contains(queries[0], tt.failedMatch) {
				t.Errorf("started query %q filters failures (%s)", queries[0], tt.failedMatch)
			}
		})
	}
}

// TestPrometheusAuto: auto runs the families' series queries in turn,
// takes the first that finds the pods and says so in the started query;
// a Java server (handled_total with code) is not taken for a Go one; with
// no family's series the error names the families and labels tried.
func TestPrometheusAuto(t *testing.T) {
	values := map[string][2]string{"pricing-0": {"50", "5"}}
	tests := []struct {
		name        string
		podLabel    string
		have        []string
		failedMatch string
		wantFamily  string
		wantTried   int
		wantErr     string
	}{
		{name: "go-grpc", have: []string{"grpc_server_started_total", "grpc_server_handled_total:grpc_code"}, failedMatch: `grpc_code!="OK"`, wantFamily: "go-grpc", wantTried: 2},
		{name: "grpc-java", have: []string{"grpc_server_started_total", "grpc_server_handled_total:code"}, failedMatch: `code!="OK"`, wantFamily: "grpc-java", wantTried: 1},
		{name: "otel", have: []string{"grpc_server_call_started_total", "grpc_server_call_duration_seconds_count"}, failedMatch: `grpc_status!="OK"`, wantFamily: "otel", wantTried: 3},
		{name: "istio", have: []string{"istio_requests_total"}, failedMatch: `grpc_response_status!="0"`, wantFamily: "istio", wantTried: 4},
		{name: "linkerd", have: []string{"request_total", "response_total"}, failedMatch: `classification="failure"`, wantFamily: "linkerd", wantTried: 5},
		{name: "none", podLabel: "kubernetes_pod_name", have: []string{"http_requests_total"}, wantTried: 5,
			wantErr: "has no series of any metric family for the 1 pods of namespace shop by target labels namespace and kubernetes_pod_name: tried grpc-java (grpc_server_handled_total), go-grpc (grpc_server_started_total), otel (grpc_server_call_started_total, rpc_server_duration_milliseconds_count, rpc_server_duration_seconds_count, rpc_server_call_duration_seconds_count), istio (istio_requests_total), linkerd (request_total)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &familyProm{have: tt.have, failedMatch: tt.failedMatch, podLabel: tt.podLabel, values: values}
			p := &evidence.Prometheus{URL: fake.start(t), Family: evidence.AutoFamily, PodLabel: tt.podLabel}
			got, queries, err := p.Calls(context.Background(), "shop", []string{"pricing-0"}, time.Minute)
			if !slices.Equal(queries, fake.queries) {
				t.Errorf("queries %q, ran %q", queries, fake.queries)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || len(queries) != tt.wantTried {
					t.Errorf("error %v after %d queries, want %q after the %d series queries", err, len(queries), tt.wantErr, tt.wantTried)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]evidence.Calls{"pricing-0": {Started: 50, Failed: 5, Succeeded: 45}}, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			for i, q := range queries[:tt.wantTried] {
				if !strings.HasPrefix(q, "count by (pod) (last_over_time(") {
					t.Errorf("query %d %q, want a series query", i, q)
				}
			}
			explicit := &evidence.Prometheus{Family: tt.wantFamily}
			started, failed := explicit.Queries("shop", []string{"pricing-0"}, time.Minute)
			if len(queries) != tt.wantTried+2 || !strings.HasPrefix(queries[tt.wantTried], started+" # "+tt.wantFamily+": the first family with series (tried grpc-java") || queries[tt.wantTried+1] != failed {
				t.Errorf("queries after the %d series queries %q; want %s's started query with a comment naming it, and its failed query", tt.wantTried, queries[tt.wantTried:], tt.wantFamily)
			}
		})
	}
}

// TestPrometheusFamilyCheck: unknown families are refused with the known
// ones listed, and target labels must be label names.
func TestPrometheusFamilyCheck(t *testing.T) {
	tests := []struct {
		name string
		p    evidence.Prometheus
		err  string
	}{
		{name: "default", p: evidence.Prometheus{URL: "http://127.0.0.1:9090"}},
		{name: "auto", p: evidence.Prometheus{URL: "http://127.0.0.1:9090", Family: "auto"}},
		{name: "labels", p: evidence.Prometheus{URL: "http://127.0.0.1:9090", Family: "istio", NamespaceLabel: "kubernetes_namespace", PodLabel: "kubernetes_pod_name"}},
		{name: "unknown family", p: evidence.Prometheus{URL: "http://127.0.0.1:9090", Family: "envoy"},
			err: `prometheus: unknown metric family "envoy": want auto, grpc-java, go-grpc, otel, istio or linkerd`},
		{name: "label with a dot", p: evidence.Prometheus{URL: "http://127.0.0.1:9090", PodLabel: "k8s.pod.name"}, err: `target label "k8s.pod.name": want a label name`},
		{name: "label injection", p: evidence.Prometheus{URL: "http://127.0.0.1:9090", NamespaceLabel: `namespace="x"} or up{a`}, err: "want a label name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Check()
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("Check() = %v, want %q", err, tt.err)
			}
			if tt.err == "" {
				return
			}
			if _, _, err := tt.p.Calls(context.Background(), "shop", []string{"a"}, time.Minute); err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Calls() error %v, want %q", err, tt.err)
			}
		})
	}
}

// TestCheckTargetLabels: namespace and pod, by label names, nothing else.
func TestCheckTargetLabels(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		err    string
	}{
		{name: "none"},
		{name: "both", labels: map[string]string{"namespace": "kubernetes_namespace", "pod": "kubernetes_pod_name"}},
		{name: "pod only", labels: map[string]string{"pod": "pod_name"}},
		{name: "other role", labels: map[string]string{"pod": "pod", "service": "svc"}, err: "service=svc: the target labels are namespace=LABEL and pod=LABEL"},
		{name: "empty", labels: map[string]string{"namespace": ""}, err: `target label "": want a label name`},
		{name: "not a name", labels: map[string]string{"pod": "0pod"}, err: `target label "0pod"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := evidence.CheckTargetLabels(tt.labels)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("CheckTargetLabels() = %v, want %q", err, tt.err)
			}
		})
	}
}

// TestCollectPrometheusAuto: through Collect, auto takes the rates from
// the family it finds; when it finds none, or finds series but no
// increase over the window, the rates stay channelz's and the problem
// says why.
func TestCollectPrometheusAuto(t *testing.T) {
	podtest.Start(t, pod.Config{Name: "good", Addr: netip.MustParseAddrPort("127.203.216.1:8471")})
	src := fakeSource{objects(readyPod("good", "127.203.216.1"))}
	tests := []struct {
		name      string
		values    [2]string
		have      []string
		wantFrom  string
		wantCalls int64
		want      string
	}{
		{name: "istio", values: [2]string{"40", "1"}, have: []string{"istio_requests_total"}, wantFrom: "prometheus", wantCalls: 40},
		{name: "none", want: "has no series of any metric family for the 1 pods of namespace shop by target labels namespace and pod: tried grpc-java"},
		{name: "short window", have: []string{"request_total"}, want: "for 1 of the 1 pods but none over the 200ms window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &familyProm{have: tt.have, failedMatch: `grpc_response_status!="0"`, values: map[string][2]string{"good": tt.values}}
			prom := &evidence.Prometheus{URL: fake.start(t), Family: evidence.AutoFamily}
			ev, err := evidence.Collect(context.Background(), src, evidence.Request{Namespace: "shop", Service: "pricing", Window: 200 * time.Millisecond, Prometheus: prom})
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantFrom != "" {
				if ev.RatesFrom != tt.wantFrom || ev.Pods[0].Calls.Started != tt.wantCalls || len(ev.Problems) != 0 {
					t.Errorf("rates from %q, pod calls %+v, problems %q; want %s's, %d started", ev.RatesFrom, ev.Pods[0].Calls, ev.Problems, tt.wantFrom, tt.wantCalls)
				}
				return
			}
			if ev.RatesFrom != "channelz" || len(ev.Problems) != 1 || !strings.Contains(ev.Problems[0], tt.want) || !strings.HasSuffix(ev.Problems[0], "the rates are channelz's") {
				t.Errorf("rates from %q, problems %q; want channelz's rates and a problem with %q", ev.RatesFrom, ev.Problems, tt.want)
			}
			if !slices.Equal(ev.Queries, fake.queries) {
				t.Errorf("evidence's queries %q, ran %q", ev.Queries, fake.queries)
			}
		})
	}
}

// TestPrometheusQueriesGolden writes every family's queries, with the
// default and with other target labels, to testdata/prom-queries.golden
// (-update rewrites it) so that a reviewer sees each query whole.
func TestPrometheusQueriesGolden(t *testing.T) {
	var b strings.Builder
	for _, q := range goldenQueries() {
		b.WriteString("# " + q.name + "\n" + q.query + "\n\n")
	}
	path := filepath.Join("testdata", "prom-queries.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("%s (-want +got; -update rewrites it after a deliberate change):\n%s", path, diff)
	}
}

type namedQuery struct{ name, query string }

// goldenQueries are each family's started, failed and series queries for
// two pods of shop over 1m, auto's series query, and go-grpc's with
// other target labels.
func goldenQueries() []namedQuery {
	pods := []string{"pricing-7d4b9c-x2x5q", "pricing-7d4b9c-zt8mw"}
	var out []namedQuery
	add := func(name string, p *evidence.Prometheus) {
		started, failed := p.Queries("shop", pods, time.Minute)
		out = append(out, namedQuery{name + " started", started}, namedQuery{name + " failed", failed},
			namedQuery{name + " series", p.SeriesQuery("shop", pods)})
	}
	for _, f := range evidence.FamilyNames()[1:] {
		add(f, &evidence.Prometheus{Family: f})
	}
	add("go-grpc, labels kubernetes_namespace and kubernetes_pod_name", &evidence.Prometheus{Family: "go-grpc", NamespaceLabel: "kubernetes_namespace", PodLabel: "kubernetes_pod_name"})
	return append(out, namedQuery{"auto series", (&evidence.Prometheus{Family: evidence.AutoFamily}).SeriesQuery("shop", pods)})
}

// TestPrometheusQueriesParse sends every golden query, and auto's started
// query with its comment, to Debian's prometheus (skipped when it is not
// installed): each must parse and give a vector.
func TestPrometheusQueriesParse(t *testing.T) {
	base := startRealPrometheus(t, needPrometheus(t))
	qs := goldenQueries()
	started, _ := (&evidence.Prometheus{Family: "otel"}).Queries("shop", []string{"a"}, time.Minute)
	qs = append(qs, namedQuery{"with a comment", started + " # otel: the first family with series (tried grpc-java, go-grpc, otel)"})
	for _, q := range qs {
		t.Run(q.name, func(t *testing.T) {
			resp, err := http.PostForm(base+"/api/v1/query", url.Values{"query": {q.query}})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var r struct {
				Status, Error string
				Data          struct{ ResultType string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" || r.Data.ResultType != "vector" {
				t.Errorf("%s: status %q, error %q, result %q (%v); want a vector", q.query, r.Status, r.Error, r.Data.ResultType, err)
			}
		})
	}
}

// startRealPrometheus runs bin on a loopback port with nothing to scrape
// until the test ends and returns its URL once it is ready.
func startRealPrometheus(t *testing.T, bin string) string {
	return startPrometheusWith(t, bin, "scrape_configs: []\n")
}

// startPrometheusWith is startRealPrometheus with config as its
// prometheus.yml.
func startPrometheusWith(t *testing.T, bin, config string) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--log.level=error")
	// It dies with the test binary, even when that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	base := "http://" + addr
	ready := func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if labtest.Poll(labtest.Context(t, 30*time.Second), 50*time.Millisecond, ready) != nil {
		t.Fatalf("prometheus at %s not ready within 30s", base)
	}
	return base
}
