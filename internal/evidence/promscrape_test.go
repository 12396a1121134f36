package evidence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

// familyExporter counts a pod's finished calls (its pod.Observer) under
// the names and labels that family's exporter gives them, and serves them
// as Prometheus text on /metrics. It stands for the exporters that cannot
// run here: java-grpc-prometheus (grpc-java), the Istio sidecar's
// destination metrics and linkerd2-proxy's inbound ones. What it exports
// is what those document (see promfamily.go); the counts are the pod's
// real calls.
type familyExporter struct {
	family    string
	reg       *prometheus.Registry
	started   *prometheus.CounterVec
	completed *prometheus.CounterVec // grpc-java's handled, Linkerd's responses; nil for Istio
}

// newFamilyExporter returns family's exporter; busy gives it zero
// series of GetPrice's outcomes at once.
func newFamilyExporter(family string, busy bool) *familyExporter {
	e := &familyExporter{family: family, reg: prometheus.NewRegistry()}
	switch family {
	case "grpc-java":
		e.started = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_started_total"}, []string{"grpc_type", "grpc_service", "grpc_method"})
		e.completed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_handled_total"}, []string{"grpc_type", "grpc_service", "grpc_method", "code", "grpc_code"})
	case "istio":
		e.started = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "istio_requests_total"}, []string{"reporter", "request_protocol", "response_code", "grpc_response_status", "destination_workload", "source_workload"})
	case "linkerd":
		e.started = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "request_total"}, []string{"direction", "tls", "authority"})
		e.completed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "response_total"}, []string{"direction", "tls", "authority", "status_code", "grpc_status", "classification"})
	}
	e.reg.MustRegister(e.started)
	if e.completed != nil {
		e.reg.MustRegister(e.completed)
	}
	// A zero series of GetPrice's successes before any call, so that the
	// first calls are an increase (a series that first appears at 40 has
	// none, to Prometheus): a busy server has had it for long, an idle
	// one has none. Failures' series appear at the first failure, as the
	// real exporters make them.
	if busy {
		e.count("pricing.v1.Pricing", "GetPrice", codes.OK, 0)
	}
	return e
}

// javaCode is io.grpc.Status.Code's name of c (UPPER_SNAKE: OK, UNAVAILABLE).
func javaCode(c codes.Code) string {
	var b strings.Builder
	prev := 'A'
	for _, r := range c.String() { // "DeadlineExceeded", "OK"
		if r >= 'A' && r <= 'Z' && prev >= 'a' && prev <= 'z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
		prev = r
	}
	return strings.ToUpper(b.String())
}

// Served counts one finished call of method ("/service/Method").
func (e *familyExporter) Served(_ netip.AddrPort, method string, code codes.Code) {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	e.count(service, name, code, 1)
}

// count adds n calls of service/method that ended with code.
func (e *familyExporter) count(service, method string, code codes.Code, n float64) {
	switch e.family {
	case "grpc-java":
		e.started.WithLabelValues("UNARY", service, method).Add(n)
		e.completed.WithLabelValues("UNARY", service, method, javaCode(code), javaCode(code)).Add(n)
	case "istio":
		e.started.WithLabelValues("destination", "grpc", "200", fmt.Sprint(int(code)), "pricing", "order").Add(n)
	case "linkerd":
		class := "success"
		if code != codes.OK {
			class = "failure"
		}
		e.started.WithLabelValues("inbound", "true", "pricing.shop.svc.cluster.local:8471").Add(n)
		e.completed.WithLabelValues("inbound", "true", "pricing.shop.svc.cluster.local:8471", "200", fmt.Sprint(int(code)), class).Add(n)
	}
}

// Conn is part of pod.Observer; the families count no connections.
func (e *familyExporter) Conn(netip.AddrPort, bool) {}

// serve serves e's metrics at addr until the test ends.
func (e *familyExporter) serve(t *testing.T, addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// TestPrometheusFamiliesScraped: Debian's prometheus scrapes 3 pods whose
// real calls are exported as grpc-java, Istio and Linkerd export them, by
// the namespace and pod target labels; diagnose's auto finds the family
// and the pods' calls: pod a 40, pod b 35 of which 15 failed (the first 5
// of them lost to increase(), which does not count a series' first value,
// and Istio's started counter with them), pod c none (0 where its health
// checks left series of a family that names the service, none where the
// family names none: Istio's and Linkerd's idle pods have no series).
func TestPrometheusFamiliesScraped(t *testing.T) {
	bin := needPrometheus(t)
	for i, family := range []string{"grpc-java", "istio", "linkerd"} {
		t.Run(family, func(t *testing.T) {
			var cfg strings.Builder
			cfg.WriteString("global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n- job_name: pods\n  static_configs:\n")
			servers := map[string]*pod.Server{}
			for k, name := range []string{"a", "b", "c"} {
				ip := fmt.Sprintf("127.203.%d.%d", 240+i, k+1)
				e := newFamilyExporter(family, name != "c")
				servers[name] = podtest.Start(t, pod.Config{Name: name, Namespace: "shop", Addr: netip.MustParseAddrPort(ip + ":8471"), Observer: e})
				e.serve(t, ip+":9471")
				fmt.Fprintf(&cfg, "  - targets: ['%s:9471']\n    labels: {namespace: shop, pod: %s}\n", ip, name)
			}
			base := startPrometheusWith(t, bin, cfg.String())
			waitScraped(t, base, 3)

			ctx := context.Background()
			call := func(name string, n int, wantErr bool) {
				cc := podtest.Dial(t, servers[name].Addr().String(), netip.MustParseAddr(fmt.Sprintf("127.203.%d.9", 240+i)))
				for range n {
					_, err := pricingv1.NewPricingClient(cc).GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "x"})
					if (err != nil) != wantErr {
						t.Fatalf("pod %s: GetPrice: %v", name, err)
					}
				}
			}
			if family == "grpc-java" {
				// The kubelet's probes: series of a service left out,
				// scraped through the window.
				cc := podtest.Dial(t, servers["c"].Addr().String(), netip.MustParseAddr(fmt.Sprintf("127.203.%d.9", 240+i)))
				if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			call("a", 40, false)
			call("b", 20, false)
			servers["b"].SetHealthy(false)
			call("b", 5, true)
			waitScrapedAfter(t, base, 3) // the failures' series now exist
			call("b", 10, true)
			waitScrapedAfter(t, base, 3)

			p := &evidence.Prometheus{URL: base, Family: evidence.AutoFamily}
			calls, queries, err := p.Calls(ctx, "shop", []string{"a", "b", "c"}, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			picked := fmt.Sprintf("# %s: the first family with series", family)
			if !strings.Contains(strings.Join(queries, "\n"), picked) {
				t.Errorf("queries %q; want %q", queries, picked)
			}
			a, b := calls["a"], calls["b"]
			// increase() extrapolates from the samples to the window's
			// edges: a few scrapes of a young series read up to twice.
			if a.Started < 35 || a.Started > 60 || b.Started < 25 || b.Started > 60 || a.Failed != 0 || b.Failed < 8 || b.Failed > 25 || b.Failed >= b.Started {
				t.Errorf("calls %+v; want a about 40 (none failed), b 30 to 35 (about 10 failed)", calls)
			}
			c, ok := calls["c"]
			if wantC := family == "grpc-java"; ok != wantC || c.Started != 0 {
				t.Errorf("pod c: %+v (in the result: %v); want 0 calls, in the result only for grpc-java", c, ok)
			}
		})
	}
}

// needPrometheus returns Debian's prometheus, or skips (fails under
// PINLAB_REQUIRE_PROMETHEUS=1, as in CI).
func needPrometheus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("PINLAB_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("prometheus not found and PINLAB_REQUIRE_PROMETHEUS=1: %v", err)
		}
		t.Skipf("prometheus not installed (apt-get install prometheus): %v", err)
	}
	return bin
}

// waitScraped waits until prometheus at base has scraped n targets at
// least twice each.
func waitScraped(t *testing.T, base string, n int) {
	t.Helper()
	q := fmt.Sprintf(`count(count_over_time(up[1m]) >= 2) == %d`, n)
	if labtest.Poll(labtest.Context(t, 30*time.Second), 100*time.Millisecond, func() bool { return promHasResult(base, q) }) != nil {
		t.Fatalf("prometheus did not scrape the %d targets twice within 30s", n)
	}
}

// waitScrapedAfter waits until prometheus at base has begun a scrape of
// each of its n targets after now (and after the pods' Observers counted
// the calls that just ended, a moment after each reply).
func waitScrapedAfter(t *testing.T, base string, n int) {
	t.Helper()
	after := float64(time.Now().Add(200*time.Millisecond).UnixMilli()) / 1000
	q := fmt.Sprintf(`count(timestamp(up) > %.3f) == %d`, after, n)
	if labtest.Poll(labtest.Context(t, 30*time.Second), 100*time.Millisecond, func() bool { return promHasResult(base, q) }) != nil {
		t.Fatalf("prometheus did not scrape the %d targets again within 30s", n)
	}
}

// promHasResult reports whether the instant query q has a result.
func promHasResult(base, q string) bool {
	resp, err := http.PostForm(base+"/api/v1/query", url.Values{"query": {q}})
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var r struct {
		Data struct{ Result []json.RawMessage }
	}
	return json.NewDecoder(resp.Body).Decode(&r) == nil && len(r.Data.Result) > 0
}
