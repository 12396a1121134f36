package evidence_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

// fakePrometheus answers instant queries as Prometheus does when its
// series have fewer than two samples in the window: increase() gives an
// empty vector; the series query gives one sample per pod in series.
func fakePrometheus(t *testing.T, series []string) string {
	return fakePrometheusIncrease(t, series, "")
}

// fakePrometheusIncrease is fakePrometheus whose increase() queries give
// increase, if not empty, for every pod in series.
func fakePrometheusIncrease(t *testing.T, series []string, increase string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		q := r.Form.Get("query")
		result := []any{}
		value := ""
		switch {
		case strings.Contains(q, "last_over_time(grpc_server_started_total"):
			value = "1"
		case strings.Contains(q, "increase("):
			value = increase
		}
		for _, p := range series {
			if value != "" {
				result = append(result, map[string]any{"metric": map[string]string{"pod": p}, "value": []any{float64(time.Now().Unix()), value}})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCollectPrometheusNoIncrease: when Prometheus gives no pod an
// increase over the window, the rates stay channelz's and the problem
// says why: a window under twice the scrape interval when the pods have
// series, no series at all otherwise.
func TestCollectPrometheusNoIncrease(t *testing.T) {
	podtest.Start(t, pod.Config{Name: "good", Addr: netip.MustParseAddrPort("127.203.211.1:8471")})
	src := fakeSource{objects(readyPod("good", "127.203.211.1"))}
	tests := []struct {
		name   string
		series []string
		want   string
	}{
		{name: "short window", series: []string{"good"}, want: "has series of grpc_server_started_total for 1 of the 1 pods but none over the 200ms window: increase() needs two samples in the window, so --window must be at least twice the scrape interval; the rates are channelz's"},
		{name: "no series", want: "no series of grpc_server_started_total for any of the 1 pods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prom := &evidence.Prometheus{URL: fakePrometheus(t, tt.series)}
			ev, err := evidence.Collect(context.Background(), src, evidence.Request{Namespace: "shop", Service: "pricing", Window: 200 * time.Millisecond, Prometheus: prom})
			if err != nil {
				t.Fatal(err)
			}
			if ev.RatesFrom != "channelz" || !ev.Pods[0].Sampled() || len(ev.Problems) != 1 || !strings.Contains(ev.Problems[0], tt.want) {
				t.Errorf("rates from %q, pod %+v, problems %q; want channelz's rates and a problem with %q", ev.RatesFrom, ev.Pods[0], ev.Problems, tt.want)
			}
			if len(ev.Queries) != 3 || !strings.HasPrefix(ev.Queries[2], "count by (pod) (last_over_time(grpc_server_started_total{") {
				t.Errorf("queries %q, want the two rate queries and the series query", ev.Queries)
			}
		})
	}
}

// TestCollectPrometheusNotCounters: values no counter's increase can have
// (NaN, negative, infinite) are refused, and the rates stay channelz's (a
// tester's fake Prometheus got -4611686018427387904 calls/s printed).
func TestCollectPrometheusNotCounters(t *testing.T) {
	podtest.Start(t, pod.Config{Name: "good", Addr: netip.MustParseAddrPort("127.203.212.1:8471")})
	src := fakeSource{objects(readyPod("good", "127.203.212.1"))}
	for _, v := range []string{"NaN", "-5000", "+Inf"} {
		t.Run(v, func(t *testing.T) {
			prom := &evidence.Prometheus{URL: fakePrometheusIncrease(t, []string{"good"}, v)}
			ev, err := evidence.Collect(context.Background(), src, evidence.Request{Namespace: "shop", Service: "pricing", Window: 200 * time.Millisecond, Prometheus: prom})
			if err != nil {
				t.Fatal(err)
			}
			if ev.RatesFrom != "channelz" || ev.Pods[0].Calls.Started < 0 || !strings.Contains(strings.Join(ev.Problems, "\n"), "not a counter's increase") {
				t.Errorf("rates from %q, pod calls %+v, problems %q; want channelz's rates and the values refused", ev.RatesFrom, ev.Pods[0].Calls, ev.Problems)
			}
		})
	}
}

// TestPrometheusCheck: any http(s) URL the user names is taken, by name
// (localhost included) or by IP, anywhere; what is not a base URL is
// refused, and so is a password, which would be printed with the URL.
func TestPrometheusCheck(t *testing.T) {
	tests := []struct {
		url, err string
	}{
		{url: "http://127.0.0.1:9090"},
		{url: "http://localhost:1"},
		{url: "http://prometheus.monitoring:9090"},
		{url: "https://10.0.0.9:9090/prometheus"},
		{url: "http://[::1]:9090"},
		{url: "127.0.0.1:9090", err: "not an http:// or https:// URL"},
		{url: "ftp://prometheus:9090", err: "not an http:// or https:// URL"},
		{url: "http://", err: "not an http:// or https:// URL"},
		{url: "http://bob:secret@prometheus:9090", err: "prometheus: http://prometheus:9090: a user and password in the URL"},
		{url: "http://prometheus:9090/?query=up", err: "without a query or fragment"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			err := (&evidence.Prometheus{URL: tt.url}).Check()
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) || err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("Check() = %v, want %q", err, tt.err)
			}
		})
	}
}
