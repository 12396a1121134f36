package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

var update = flag.Bool("update", false, "rewrite golden files")

// checkGolden compares got with testdata/name, which -update rewrites.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("output differs from %s (-want +got; rerun with -update if intended):\n%s", golden, diff)
	}
}

func f(v float64) *float64 { return &v }

func off(s float64) *stats.Offset { o := stats.Offset(s * 1e9); return &o }

func sample() *Result {
	pods := func(shares ...float64) []stats.PodStats {
		var out []stats.PodStats
		for i, s := range shares {
			p := stats.PodStats{Name: "pricing-7d9f8-" + string(rune('a'+i)), IP: "127.244.0." + string(rune('2'+i)), Ordinal: i + 1,
				ReadyAt: f(-0.5), Calls: int64(s * 10000), Rate: s * 1000, Share: s, Conns: 2 * s, State: stats.PodReady}
			if i >= 2 {
				p.ReadyAt, p.Added = f(10.6), true
			}
			if i == 1 && len(shares) > 2 { // a pod marked not ready, and one restarted
				p.State, p.Changes = stats.PodNotReady, []stats.PhaseChange{{Phase: stats.PodNotReady, At: 45e9}}
			}
			if i == 3 {
				p.Changes = []stats.PhaseChange{{Phase: stats.PodRestarted, At: 50e9}, {Phase: stats.PodNotReady, At: 50e9}, {Phase: stats.PodReady, At: 51.2e9}}
			}
			out = append(out, p)
		}
		return out
	}
	w := func(name string, from, to float64, jain float64, ps []stats.PodStats) stats.WindowStats {
		return stats.WindowStats{Name: name, From: from, To: to, Pods: ps, Calls: 10000, Rate: 1000, Jain: jain, MaxMean: 1 / jain,
			ConnsPerClient: 1, Errors: map[string]int64{}, LatencyP50: 0.41, LatencyP99: 2.5}
	}
	return &Result{
		Scenario: "scale-out", Description: "pricing scales from 2 to 4 pods.", Source: "builtin:scale-out",
		Duration: 60, Seed: 42, SideBySide: true, MinResolve: 30, DNSTTL: 5,
		Windows: []WindowSpec{{Name: "before", From: 3, To: 10}, {Name: "settled", From: 40, To: 60}},
		Steps:   []string{"10s: scale Deployment pricing to 4"},
		Variants: []Variant{
			{Name: "clusterip", Description: "ClusterIP", Groups: []Group{{Name: "order", Target: "pricing.shop.svc.cluster.local:8471", ServiceKind: "ClusterIP", ClusterIP: "127.96.1.2",
				Policy: "pick_first", Clients: 4, Rate: 250}}, Why: "kube-proxy picked once per connection.", DNS: "127.96.0.10:53",
				Diagnoses: []Diagnosis{{Service: "shop/pricing", At: 53, Result: &diagnose.Result{
					Evidence: evidence.Evidence{Window: 5e9, Problems: []string{"pod pricing-7d9f8-d: channelz GetServers timed out"}},
					Rates:    diagnose.Rates{Total: 1000, Jain: 0.5, Idle: 2, Counted: 3, Unread: 1},
					Clients:  []diagnose.Client{{Name: "127.244.0.9", Busy: 1}, {Name: "127.244.0.10", Busy: 1}, {Name: "127.244.0.11", Conns: 1}},
					Verdict:  diagnose.Pinned, Cause: "clusterip-connection"}},
					{Service: "shop/pricing-headless", At: 53, Error: "evidence: no such Service"}},
				Summary: stats.Summary{
					Windows: []stats.WindowStats{w("before", 3, 10, 1, pods(0.5, 0.5)), w("settled", 40, 60, 0.5, pods(0.5, 0.5, 0, 0))},
					Clients: []stats.ClientStats{{Name: "order-0", IP: "127.244.0.9"}},
					Proxy: []stats.ProxyConn{
						{Opened: 0.012e9, Closed: off(5), Client: "127.244.0.9:40001", VIP: "127.96.1.2:8471", Endpoint: "127.244.0.3:8471", Pod: "pricing-7d9f8-b"},
						{Opened: 5.1e9, Client: "127.244.0.9:40002", VIP: "127.96.1.2:8471", Endpoint: "127.244.0.2:8471", Pod: "pricing-7d9f8-a"},
					},
				}},
			{Name: "headless-rr-age", Groups: []Group{{Name: "order", Target: "pricing-headless.shop.svc.cluster.local:8471", ServiceKind: "headless", Policy: "round_robin", Clients: 4, Rate: 250},
				{Name: "cart", Target: "pricing.shop.svc.cluster.local:8471", ServiceKind: "ClusterIP", ClusterIP: "127.97.4.4", Policy: "pick_first", Clients: 1, Rate: 50}},
				Servers: "pricing: MaxConnectionAge 10s", Patches: "Deployment shop/pricing (strategic)", Why: "order: re-resolved at 30s.\ncart: pinned.", DNS: "127.97.0.10:21053",
				WhyByGroup: []verdict.Why{{Group: "order", Line: "re-resolved at 30s."}, {Group: "cart", Line: "pinned."}},
				Summary: stats.Summary{Windows: []stats.WindowStats{w("before", 3, 10, 1, pods(0.5, 0.5)), w("settled", 40, 60, 1, pods(0.25, 0.25, 0.25, 0.25))},
					Groups: []stats.GroupStats{
						{Name: "cart", Service: "shop/pricing", Windows: []stats.WindowStats{w("before", 3, 10, 0.5, pods(1, 0)), w("settled", 40, 60, 0.25, pods(1, 0, 0, 0))}},
						{Name: "order", Service: "shop/pricing-headless", Windows: []stats.WindowStats{w("before", 3, 10, 1, pods(0.5, 0.5)), w("settled", 40, 60, 1, pods(0.25, 0.25, 0.25, 0.25))}},
					},
					ErrorWindows: []stats.ErrorWindow{{From: 30e9, To: 31.5e9, Failed: 12, ByCode: map[string]int64{"Unavailable": 12}, ByCause: map[string]int64{"refused": 10, "goaway": 2}}},
					Rebalance:    []stats.Rebalance{{Pod: "pricing-7d9f8-c", ReadyAt: 10.6e9, After: f(19.4), Survived: true}, {Pod: "pricing-7d9f8-d", ReadyAt: 10.6e9, After: f(19.5), Survived: true}}},
				Expectations: verdict.Expectations{Overloaded: []verdict.Overload{{Window: "settled", Reason: "schedule lag p99 35.0 ms, max 410 ms"}}, Checks: []verdict.Check{
					{Name: "new pods get calls", Metric: "addedShare", Window: "settled", Bound: ">= 0.4", Value: f(0.5), Shown: "0.5", Pass: true},
					{Name: "cart pinned", Metric: "jain", Window: "settled", Group: "cart", Bound: "<= 0.3", Value: f(0.25), Shown: "0.25", Pass: true},
					{Name: "fast", Metric: "latencyP99Ms", Window: "settled", Bound: "<= 20", Value: f(410), Shown: "410", Invalid: true, Note: "overloaded: schedule lag p99 35.0 ms, max 410 ms"},
					{Name: "no failed calls", Metric: "failed", Bound: "<= 0", Value: f(12), Shown: "12", Pass: false},
					{Name: "busy pod keeps calls", Metric: "podCalls", Window: "settled", Pod: "pricing-7d9f8-a", Bound: ">= 1", Shown: "n/a", Skipped: true, Note: "not measured: the run was interrupted before the window ended"},
				}}},
			{Name: "cut", Groups: []Group{{Name: "order", Target: "x:1", ServiceKind: "headless", Policy: "round_robin", Clients: 1, Rate: 10}}, State: "interrupted", Interrupted: 15.2,
				Summary: stats.Summary{Windows: []stats.WindowStats{{Name: "before", From: 3, To: 10, Errors: map[string]int64{"Unavailable": 70}}}}},
			{Name: "broken", Groups: []Group{{Name: "order", Target: "x:1", ServiceKind: "ClusterIP", Policy: "pick_first", Clients: 1, Rate: 1}}, State: "failed", Error: "pods not ready"},
		},
	}
}

func TestTextGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := Text(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "scale-out.golden", buf.Bytes())
}

func TestJSONRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := JSON(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sample(), &back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}

// TestTextDataplane: a variant on a real control plane names its
// dataplane, and under the real kube-proxy its connections through the
// VIP read as the kernel's conntrack entries.
func TestTextDataplane(t *testing.T) {
	tests := []struct {
		name      string
		dataplane string
		cluster   string
		want      []string
		wantNot   []string
	}{
		{name: "a cluster run", cluster: "https://10.0.0.1:6443", want: []string{"pinlab cluster run: ", " on https://10.0.0.1:6443\n", "; DNS: the cluster's own\n", "%      -  ready\n"},
			wantNot: []string{"pinlab lab run", "DNS TTL", "%    1.0  ready\n"}},
		{name: "embedded", dataplane: "", wantNot: []string{"dataplane", "conntrack table"},
			want: []string{"kube-proxy connections open when load stopped (client -> VIP -> pod):"}},
		{name: "pinlab on a real control plane", dataplane: "pinlab", want: []string{"   dataplane pinlab (pinlab's kube-proxy emulation and DNS)\n"}, wantNot: []string{"conntrack table"}},
		{name: "real kube-proxy", dataplane: "kube-proxy-nftables", want: []string{
			"   dataplane kube-proxy-nftables (the real kube-proxy and the real CoreDNS; connections through ClusterIPs read from conntrack, DNS answers from CoreDNS's dnstap)\n",
			"kube-proxy connections open when load stopped (client -> VIP -> pod, from the kernel's conntrack table):",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sample()
			r.Variants = r.Variants[:1]
			r.Variants[0].Dataplane = tt.dataplane
			r.Cluster = tt.cluster
			var buf bytes.Buffer
			if err := Text(&buf, r); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !bytes.Contains(buf.Bytes(), []byte(w)) {
					t.Errorf("report lacks %q:\n%s", w, buf.String())
				}
			}
			for _, w := range tt.wantNot {
				if bytes.Contains(buf.Bytes(), []byte(w)) {
					t.Errorf("report has %q:\n%s", w, buf.String())
				}
			}
		})
	}
}

// TestBurstIsNotOverload: where the lab's own work put the generator
// behind, the report says BURST and the result is not "overloaded" (the
// field scripts check); the machine's overload says OVERLOADED and is.
func TestBurstIsNotOverload(t *testing.T) {
	tests := []struct {
		name       string
		overloads  []verdict.Overload
		label      string
		overloaded bool
	}{
		{name: "the lab's burst", overloads: []verdict.Overload{{Window: "after", Reason: "the lab's own work (at 10s 8 pods starting, 0 connections opening): schedule lag p99 28.0 ms", Burst: true}},
			label: "BURST: variant a, window after: the lab's own work"},
		{name: "the machine", overloads: []verdict.Overload{{Reason: "3 seconds with schedule lag p99 up to 40.0 ms"}},
			label: "OVERLOADED: variant a, the run: the machine was overloaded", overloaded: true},
		{name: "both", overloads: []verdict.Overload{{Window: "after", Reason: "the lab's own work", Burst: true}, {Reason: "a stall"}},
			label: "OVERLOADED: variant a, the run", overloaded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &plan.Plan{Name: "s", Duration: 20 * time.Second, Variants: []plan.Variant{{Name: "a"}}}
			run := &outcome.Run{Variants: []outcome.Variant{{Variant: "a", State: "done", Started: true}}}
			res := New(p, run, []verdict.Verdict{{Expectations: verdict.Expectations{Overloaded: tt.overloads}}})
			var b strings.Builder
			if err := Text(&b, res); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.label) {
				t.Errorf("report:\n%s\nwant a line %q", b.String(), tt.label)
			}
			if res.Overloaded != tt.overloaded {
				t.Errorf("Result.Overloaded %v, want %v", res.Overloaded, tt.overloaded)
			}
		})
	}
}
