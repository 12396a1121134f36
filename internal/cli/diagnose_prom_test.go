package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/prometheus/common/model"
)

// needPrometheus returns the path of Debian's prometheus binary, or skips
// the test (fails it when PINLAB_REQUIRE_PROMETHEUS=1, as in CI).
func needPrometheus(t *testing.T) string {
	path, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("PINLAB_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("prometheus not found and PINLAB_REQUIRE_PROMETHEUS=1: %v (apt-get install prometheus)", err)
		}
		t.Skipf("prometheus not installed (apt-get install prometheus; PINLAB_REQUIRE_PROMETHEUS=1 makes this a failure): %v", err)
	}
	return path
}

// startPrometheus runs prometheus on a loopback port of its own, scraping
// the lab's pod metrics ports every second (the config `pinlab lab targets
// -o scrape-config` prints), until the test ends; it returns the server's
// URL once it has scraped every pod for window.
func (d *diagLab) startPrometheus(t *testing.T, bin string, window time.Duration) string {
	t.Helper()
	dir := t.TempDir()
	objs, err := d.ctl.Objects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	groups := control.MetricsTargets(objs.Pods)
	var cfg strings.Builder
	if err := control.WriteScrapeConfig(&cfg, groups, model.Duration(scrapeInterval).String()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--log.level=warn")
	// It dies with the test binary, even when that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var logs labtest.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	w := model.Duration(window)
	ready := fmt.Sprintf(`count(min_over_time(up{job="pinlab"}[%s]) == 1 and count_over_time(up{job="pinlab"}[%s]) >= %d) == %d`, w, w, int(window.Seconds()/scrapeInterval.Seconds()), len(groups))
	everUp := fmt.Sprintf(`count(max_over_time(up{job="pinlab"}[5m]) == 1) == %d`, len(groups))
	waitCtx := labtest.Context(t, 60*time.Second)
	if labtest.Poll(waitCtx, 100*time.Millisecond, func() bool { return promHas(base, ready) }) != nil {
		if promHas(base, everUp) {
			t.Skipf("overloaded: prometheus scraped every pod, but not each of them at every %v scrape (timeout %v) for %v within 60s", scrapeInterval, scrapeInterval, window)
		}
		t.Fatalf("prometheus never scraped every pod's metrics within 60s")
	}
	return base
}

// scrapeInterval is the test Prometheus's scrape interval (and timeout).
const scrapeInterval = time.Second

// promHas reports whether the instant query q has a result.
func promHas(base, q string) bool {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var r struct {
		Data struct{ Result []json.RawMessage }
	}
	return json.NewDecoder(resp.Body).Decode(&r) == nil && len(r.Data.Result) == 1
}

// TestDiagnoseThroughPrometheus: the same verdicts with the rates taken
// from Debian's prometheus scraping the pods' grpc-ecosystem metrics.
func TestDiagnoseThroughPrometheus(t *testing.T) {
	bin := needPrometheus(t)
	const window = 4 * time.Second
	t.Run("pinned through the ClusterIP", func(t *testing.T) {
		d := startDiagLab(t, 4, 2, nil)
		d.load(t, d.dnsTarget("pricing"), "pick_first", 100, nil)
		prom := d.startPrometheus(t, bin, window)
		code, r, stderr := d.diagnose(t, "pricing", "--prometheus", prom, "--window", window.String(), "-v")
		d.checkVerdict(t, code, r, ExitPinned, diagnose.Pinned, "clusterip-connection")
		if r.Evidence.RatesFrom != "prometheus" || !strings.Contains(stderr, "prometheus query: sum by (pod) (increase(grpc_server_started_total{") {
			t.Errorf("rates from %q, stderr %q; want prometheus and the queries shown", r.Evidence.RatesFrom, stderr)
		}
		if r.Rates.Idle < 2 || r.Rates.Total < 150 {
			t.Errorf("step 1: %d idle, %.0f calls/s; want 2 or 3 idle of 4 (2 clients, one connection each) and about 200 calls/s", r.Rates.Idle, r.Rates.Total)
		}
	})
	t.Run("grpc-go's OpenTelemetry metrics, found by auto", func(t *testing.T) {
		dep := diagDeployment("pricing", 4, nil)
		c := &dep.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, "--metrics", "otel")
		d := startDiagLabWith(t, dep, 2, nil)
		d.load(t, d.dnsTarget("pricing"), "pick_first", 100, nil)
		prom := d.startPrometheus(t, bin, window)
		code, r, stderr := d.diagnose(t, "pricing", "--prometheus", prom, "--window", window.String(), "-v")
		d.checkVerdict(t, code, r, ExitPinned, diagnose.Pinned, "clusterip-connection")
		if r.Evidence.RatesFrom != "prometheus" || !strings.Contains(stderr, "grpc_server_call_started_total") || !strings.Contains(stderr, "otel: the first family with series") {
			t.Errorf("rates from %q, stderr %q; want prometheus, the otel family chosen by auto", r.Evidence.RatesFrom, stderr)
		}
		if r.Rates.Idle < 2 || r.Rates.Total < 150 {
			t.Errorf("step 1: %d idle, %.0f calls/s; want 2 or 3 idle of 4 and about 200 calls/s", r.Rates.Idle, r.Rates.Total)
		}
	})
	t.Run("balanced under round_robin", func(t *testing.T) {
		d := startDiagLab(t, 4, 2, nil)
		d.load(t, d.dnsTarget("pricing-headless"), "round_robin", 100, nil)
		prom := d.startPrometheus(t, bin, window)
		code, r, _ := d.diagnose(t, "pricing-headless", "--prometheus", prom, "--window", window.String())
		d.checkVerdict(t, code, r, ExitOK, diagnose.Balanced, "")
	})
	t.Run("window under twice the scrape interval", func(t *testing.T) {
		d := startDiagLab(t, 2, 2, nil)
		d.load(t, d.dnsTarget("pricing"), "pick_first", 50, nil)
		prom := d.startPrometheus(t, bin, window)
		// A 500ms range holds at most one sample of a 1s scrape:
		// increase() has nothing, while the series are there.
		code, r, _ := d.diagnose(t, "pricing", "--prometheus", prom, "--window", "500ms")
		if r.Evidence.RatesFrom != "channelz" || len(r.Evidence.Problems) != 1 || !strings.Contains(r.Evidence.Problems[0], "but none over the 500ms window: increase() needs two samples in the window, so --window must be at least twice the scrape interval; the rates are channelz's") {
			t.Errorf("exit %d, rates from %q, problems %q; want channelz's rates and the window named as too short", code, r.Evidence.RatesFrom, r.Evidence.Problems)
		}
		if r.Rates.Counted != 2 {
			t.Errorf("step 1: %d pods counted, want both, from channelz", r.Rates.Counted)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		d := startDiagLab(t, 2, 1, nil)
		code, r, _ := d.diagnose(t, "pricing", "--prometheus", "http://"+freeAddr(t), "--window", "500ms")
		if code != ExitUnknown || r.Evidence.RatesFrom != "channelz" || len(r.Evidence.Problems) == 0 || !strings.Contains(r.Evidence.Problems[0], "could not be reached") {
			t.Errorf("exit %d, rates from %q, problems %q; want could not tell, channelz's rates and the unreachable Prometheus named", code, r.Evidence.RatesFrom, r.Evidence.Problems)
		}
	})
}
