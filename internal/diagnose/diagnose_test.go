package diagnose_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/evidence/evidencetest"
)

type pod = evidencetest.Pod

// pinnedPods: 4 clients, one connection each, on the first 2 of 10 pods.
func pinnedPods() []pod {
	pods := []pod{{Calls: map[int]float64{0: 250, 1: 250}}, {Calls: map[int]float64{2: 250, 3: 250}}}
	for range 8 {
		pods = append(pods, pod{Added: true, Calls: map[int]float64{-1: 1}})
	}
	return pods
}

// spread: each client has a connection to each of n pods, rate each.
func spread(n, clients int, rate float64) []pod {
	var pods []pod
	for range n {
		calls := map[int]float64{}
		for c := range clients {
			calls[c] = rate
		}
		pods = append(pods, pod{Calls: calls})
	}
	return pods
}

// notServing marks pod i of ev NOT_SERVING in grpc.health.v1.
func notServing(ev evidence.Evidence, i int) evidence.Evidence {
	ev.Pods[i].Health = "NOT_SERVING"
	return ev
}

// notReady marks pod i of ev not ready.
func notReady(ev evidence.Evidence, i int) evidence.Evidence {
	ev.Pods[i].Ready = false
	return ev
}

// allNotReady marks every pod of ev not ready, as the Service's endpoints.
func allNotReady(ev evidence.Evidence) evidence.Evidence {
	for i := range ev.Pods {
		ev.Pods[i].Ready = false
	}
	ev.Service.Ready = 0
	return ev
}

// scaledToZero is a Service without pods whose Deployment has 0 replicas.
func scaledToZero() evidence.Evidence {
	ev := evidencetest.Build(false, nil, 0, nil)
	ev.Service.Workloads = []evidence.Workload{{Kind: "Deployment", Name: "pricing", Replicas: 0}}
	return ev
}

// annotated gives ev's Service annotations a.
func annotated(ev evidence.Evidence, a map[string]string) evidence.Evidence {
	ev.Service.Annotations = a
	return ev
}

// renewed marks every connection of ev as opened during the window.
func renewed(ev evidence.Evidence) evidence.Evidence {
	for i := range ev.Pods {
		for j := range ev.Pods[i].Conns {
			ev.Pods[i].Conns[j].New = true
		}
	}
	return ev
}

func TestDiagnose(t *testing.T) {
	uneven := func() []pod {
		return []pod{{Calls: map[int]float64{0: 150}}, {Calls: map[int]float64{1: 150}}, {Calls: map[int]float64{2: 40}}, {Calls: map[int]float64{3: 40}}}
	}
	istio := map[string]string{"sidecar.istio.io/status": "{}"}
	stale := append(spread(3, 2, 100), pod{Added: true}, pod{Added: true})
	tests := []struct {
		name    string
		ev      evidence.Evidence
		verdict diagnose.Verdict
		cause   string
		proxy   bool
		why     string   // a part of Why, if not empty
		fixes   []string // fix names that must be among Fixes
	}{
		// A fresh user's 3 pods turned not ready while 4 clients kept 1000
		// calls/s on them: no pod to measure, but the cause is plain.
		{name: "every pod not ready, still serving", ev: allNotReady(evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 250, 1: 250}}, {Calls: map[int]float64{2: 250, 3: 250}}, {Calls: map[int]float64{-1: 1}}}, 4, nil)), verdict: diagnose.Pinned, cause: "stale-addresses",
			why: "none of the 3 pods of shop/pricing is ready (0 of 3 endpoints ready), yet pricing-0, pricing-1 served 1000 calls/s; 4 clients hold 1 busy connection each"},
		// A fresh tester's pods turned not ready with no client calling:
		// the kubelet's probes (1 call/s per pod) are no stale client.
		{name: "every pod not ready, only probes", ev: allNotReady(evidencetest.Build(false, []pod{{Calls: map[int]float64{-1: 1}}, {Calls: map[int]float64{-1: 1}}, {Calls: map[int]float64{-1: 1}}}, 0, nil)), verdict: diagnose.Unknown, cause: "no-samples", why: "none of the 3 pods of shop/pricing is ready"},
		{name: "every pod not ready, idle", ev: allNotReady(evidencetest.Build(false, []pod{{}, {}}, 0, nil)), verdict: diagnose.Unknown, cause: "no-samples", why: "none of the 2 pods of shop/pricing is ready"},
		{name: "scaled to 0", ev: scaledToZero(), verdict: diagnose.Unknown, cause: "no-pods", why: "Deployment shop/pricing scaled to 0 replicas: Service shop/pricing has no pods and 0 ready endpoints (0 in its EndpointSlices)"},
		// MaxConnectionAge rotating each client's one connection: the same
		// skew is chance, not pinning (the fix is already in place).
		{name: "one connection each, held", ev: evidencetest.Build(false, uneven(), 4, nil), verdict: diagnose.Pinned, cause: "clusterip-connection"},
		{name: "one connection each, rotating", ev: renewed(evidencetest.Build(false, uneven(), 4, nil)), verdict: diagnose.Unknown, cause: "rotating-connections", why: "4 of the 4 busy connections opened during the window"},
		{name: "balanced, rotating", ev: renewed(evidencetest.Build(false, spread(4, 2, 100), 2, nil)), verdict: diagnose.Balanced, why: "8 of the 8 busy connections opened during the window"},
		{name: "selector matches nothing", ev: evidencetest.Build(false, nil, 0, nil), verdict: diagnose.Unknown, cause: "no-pods", why: "its selector app=pricing matches no pod"},
		{name: "ClusterIP after a scale-out", ev: evidencetest.Build(false, pinnedPods(), 4, nil), verdict: diagnose.Pinned, cause: "clusterip-connection"},
		{name: "headless pick_first", ev: evidencetest.Build(true, pinnedPods(), 4, nil), verdict: diagnose.Pinned, cause: "headless-pick-first"},
		{name: "headless round_robin", ev: evidencetest.Build(true, spread(4, 2, 100), 2, nil), verdict: diagnose.Balanced},
		{name: "round_robin, pods added after resolution", ev: evidencetest.Build(true, stale, 2, nil), verdict: diagnose.Pinned, cause: "added-after-resolution"},
		{name: "client sidecars, even", ev: evidencetest.WithClientContainers(evidencetest.Build(false, spread(4, 2, 100), 2, istio), "order", "istio-proxy"), verdict: diagnose.Balanced, proxy: true},
		// A peak_ewma sidecar favours the fast pods: its own skew, not
		// pinning; never "add a proxy".
		{name: "client sidecars, skewed by their policy", ev: evidencetest.WithClientContainers(evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 200, 1: 200}}, {Calls: map[int]float64{0: 200, 1: 200}}, {Calls: map[int]float64{0: 2, 1: 2}}}, 2, istio), "order", "linkerd-proxy"),
			verdict: diagnose.Unknown, cause: "l7-proxy", proxy: true},
		// A tester's Linkerd annotation on client pods that each hold one
		// connection to one pod: no balancing proxy is in their path.
		{name: "mesh annotation without its proxy", ev: evidencetest.Build(false, pinnedPods(), 4, map[string]string{"linkerd.io/proxy-version": "stable-2.14"}),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "Service shop/pricing is a ClusterIP"},
		// A sidecar that lets the calls bypass it (port skipped): one
		// connection to one of 10 pods per client.
		{name: "client sidecars bypassed", ev: evidencetest.WithClientContainers(evidencetest.Build(false, pinnedPods(), 4, istio), "order", "istio-proxy"),
			verdict: diagnose.Pinned, cause: "clusterip-connection", fixes: []string{"route the calls through the clients' sidecar"}},
		{name: "inbound sidecars", ev: evidencetest.Build(false, []pod{{Calls: map[int]float64{-2: 500}}, {Calls: map[int]float64{-2: 10}}}, 0, nil), verdict: diagnose.Unknown, cause: "inbound-proxy"},
		{name: "no calls", ev: evidencetest.Build(false, []pod{{}, {}}, 0, nil), verdict: diagnose.Unknown, cause: "no-calls"},
		{name: "probes only", ev: evidencetest.Build(false, []pod{{Calls: map[int]float64{-1: 1}}, {Calls: map[int]float64{-1: 1}}}, 0, nil), verdict: diagnose.Unknown, cause: "no-calls", why: "2.0 calls/s of probes"},
		// A fresh user's scale from 6 to 8 under round_robin, rates from
		// Prometheus, which had no series yet for the 2 new pods: even over
		// the 6 read, never balanced.
		{name: "even over the pods read, 2 not read", ev: evidencetest.Build(true, append(spread(6, 2, 100), pod{Added: true, Err: "no series"}, pod{Added: true, Err: "no series"}), 2, nil), verdict: diagnose.Unknown, cause: "unread-pods"},
		{name: "no channelz anywhere", ev: evidencetest.Build(false, []pod{{Err: "no channelz"}}, 0, nil), verdict: diagnose.Unknown, cause: "no-samples"},
		// A Service annotated for pinlab's xDS control plane: even
		// clients may be xDS ones or DNS round_robin ones, pinned ones
		// do not dial the xDS name, and bad annotations are named.
		{name: "balanced, annotated for xDS", ev: annotated(evidencetest.Build(true, spread(4, 2, 100), 2, nil), map[string]string{
			"xds.pinlab.dev/lb-policy": "least_request", "xds.pinlab.dev/outlier-detection": `{"failurePercentageEjection": {"threshold": 30}}`}),
			verdict: diagnose.Balanced, why: "annotated for pinlab's xDS control plane (least_request, outlier detection: failure percentage above 30% (50 calls, 5 hosts) every 10s, ejected 30s+, at most 10% of endpoints): clients dialling xds:///pricing-headless.shop:PORT balance per call with that policy, and from the pods' side look like DNS round_robin clients"},
		{name: "pinned, annotated for xDS", ev: annotated(evidencetest.Build(false, pinnedPods(), 4, nil), map[string]string{"xds.pinlab.dev/lb-policy": "round_robin"}),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "annotated for pinlab's xDS control plane (round_robin), but these clients are pinned, so they do not dial xds:///pricing.shop:PORT"},
		{name: "pinned, annotated for xDS pick_first", ev: annotated(evidencetest.Build(false, pinnedPods(), 4, nil), map[string]string{"xds.pinlab.dev/lb-policy": "pick_first"}),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "(pick_first): clients dialling xds:///pricing.shop:PORT also hold one connection each"},
		{name: "balanced, bad xDS annotation", ev: annotated(evidencetest.Build(true, spread(4, 2, 100), 2, nil), map[string]string{"xds.pinlab.dev/lb-policy": "fastest"}),
			verdict: diagnose.Balanced, why: `xds.pinlab.dev annotations are invalid (annotation xds.pinlab.dev/lb-policy="fastest"`},
		{name: "uneven clients, every pod connected", ev: evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 400}}, {Calls: map[int]float64{1: 20}}}, 2, nil), verdict: diagnose.Pinned, cause: "clusterip-connection"},
		// lab run health-check: a pod turned NOT_SERVING stays Ready;
		// round_robin clients with health checking keep their connection
		// (its health watch) but send it no calls.
		{name: "health-checking clients avoid a NOT_SERVING pod", ev: notServing(evidencetest.Build(true, append(spread(2, 4, 50), pod{Calls: map[int]float64{-1: 1}}), 4, nil), 2),
			verdict: diagnose.Balanced, why: "no calls reach it, as clients with gRPC health checking take it out of rotation"},
		{name: "clients without health checking call a NOT_SERVING pod", ev: notServing(evidencetest.Build(true, spread(3, 4, 50), 4, nil), 2),
			verdict: diagnose.Balanced, why: "200 calls/s still reach it"},
		// lab run not-ready: the busiest pod turns not ready and keeps
		// its clients' connections.
		{name: "a pod not ready keeps its connections", ev: notReady(evidencetest.Build(true, spread(3, 4, 50), 4, nil), 0),
			verdict: diagnose.Balanced, why: "1 pod not ready (pricing-0) still receives 200 calls/s"},
		// lab run not-ready, clusterip: every client's one connection
		// went to the pod that turned not ready; the ready pods see probes.
		{name: "every client on a pod not ready", ev: notReady(evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 50, 1: 50, 2: 50, 3: 50}}, {Calls: map[int]float64{-1: 1}}, {Calls: map[int]float64{-1: 1}}}, 4, nil), 0),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "1 pod not ready (pricing-0) still receives 200 calls/s, counted in the figures"},
		{name: "several connections, uneven rates", ev: evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 400, 1: 5}}, {Calls: map[int]float64{0: 30, 1: 5}}}, 2, nil), verdict: diagnose.Unknown, cause: "uneven-clients"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := diagnose.Diagnose(tt.ev)
			if !strings.Contains(r.Why, tt.why) {
				t.Errorf("why = %q; want it to contain %q", r.Why, tt.why)
			}
			if r.Verdict != tt.verdict || r.Cause != tt.cause || r.Path.Proxy != tt.proxy {
				t.Errorf("verdict %q, cause %q, proxy %v; want %q, %q, %v\nwhy: %s", r.Verdict, r.Cause, r.Path.Proxy, tt.verdict, tt.cause, tt.proxy, r.Why)
			}
			if !strings.Contains(r.Why, tt.why) {
				t.Errorf("why: %s\nwant it to contain %q", r.Why, tt.why)
			}
			for _, f := range tt.fixes {
				if !slices.ContainsFunc(r.Fixes, func(x diagnose.Fix) bool { return x.Name == f }) {
					t.Errorf("fixes %+v; want %q among them", r.Fixes, f)
				}
			}
			if r.Verdict == diagnose.Pinned && (len(r.Fixes) == 0 || r.Reproduce == "") {
				t.Errorf("pinned without fixes or a scenario: %+v", r)
			}
		})
	}
}

// TestDiagnoseBytes: an agent's evidence (bytes, not calls) is judged
// with the bytes threshold: pinned ClusterIP clients at 25 000 bytes/s
// each are pinned; connections at 300 bytes/s (about one small call a
// second, under MinConnBytes) carry no client's load, though 300 is far
// above MinConnRate; the figures say bytes/s.
func TestDiagnoseBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pods    []pod
		verdict diagnose.Verdict
		cause   string
	}{
		{name: "pinned", pods: []pod{{Calls: map[int]float64{0: 25000}}, {Calls: map[int]float64{1: 25000}}, {Calls: map[int]float64{-1: 300}}, {Calls: map[int]float64{-1: 300}}},
			verdict: diagnose.Pinned, cause: "clusterip-connection"},
		{name: "slow connections are no client's load", pods: []pod{{Calls: map[int]float64{0: 300}}, {Calls: map[int]float64{1: 300}}, {}, {}},
			verdict: diagnose.Unknown, cause: "no-clients"},
		{name: "balanced", pods: spread(4, 3, 5000), verdict: diagnose.Balanced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := diagnose.Diagnose(evidencetest.AsBytes(evidencetest.Build(false, tc.pods, 3, nil)))
			if r.Verdict != tc.verdict || r.Cause != tc.cause {
				t.Errorf("verdict %s (%s), want %s (%s): %s", r.Verdict, r.Cause, tc.verdict, tc.cause, r.Why)
			}
			if r.Rates.Unit != "bytes/s" || r.Rates.BusyAbove != diagnose.MinConnBytes {
				t.Errorf("unit %q above %v, want bytes/s above MinConnBytes", r.Rates.Unit, r.Rates.BusyAbove)
			}
			if r.Verdict != diagnose.Balanced && !strings.Contains(r.Why, "bytes/s") {
				t.Errorf("why does not say bytes/s: %s", r.Why)
			}
		})
	}
}

// TestDiagnoseConnections: with only the open connections read (exec),
// pods that hold no client connection give the pinning verdicts, and
// connections on every pod give no verdict of balance.
func TestDiagnoseConnections(t *testing.T) {
	for _, tc := range []struct {
		name     string
		headless bool
		pods     []pod
		clients  int
		sidecars bool // the clients have an Istio sidecar
		late     bool // every connection opened during the window, seen in the last two readings
		verdict  diagnose.Verdict
		cause    string
		why      string
	}{
		{name: "2 clients through a ClusterIP, 4 pods", pods: []pod{{Calls: map[int]float64{0: 1}}, {Calls: map[int]float64{1: 1}}, {}, {}}, clients: 2,
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "2 of 4 ready pods idle"},
		{name: "pick_first over a headless Service", headless: true, pods: []pod{{Calls: map[int]float64{0: 1, 1: 1}}, {}, {}}, clients: 2,
			verdict: diagnose.Pinned, cause: "headless-pick-first"},
		{name: "round_robin, every pod connected", headless: true, pods: spread(4, 3, 1), clients: 3,
			verdict: diagnose.Unknown, cause: "connections-only", why: "about evenly, but exec reads which connections are open, not the calls on them"},
		{name: "every pod connected, unevenly", pods: []pod{{Calls: map[int]float64{0: 1, 1: 1, 2: 1}}, {Calls: map[int]float64{0: 1}}, {Calls: map[int]float64{0: 1}}}, clients: 3,
			verdict: diagnose.Unknown, cause: "connections-only", why: "unevenly"},
		{name: "round_robin, pods added after the last resolution", headless: true, pods: append(spread(3, 2, 1), pod{Added: true}, pod{Added: true}), clients: 2,
			verdict: diagnose.Pinned, cause: "added-after-resolution"},
		{name: "6 one-connection clients on every pod, 4/1/1", pods: []pod{{Calls: map[int]float64{0: 1, 1: 1, 2: 1, 3: 1}}, {Calls: map[int]float64{4: 1}}, {Calls: map[int]float64{5: 1}}}, clients: 6,
			verdict: diagnose.Unknown, cause: "connections-only", why: "unevenly"},
		{name: "pick_first over a headless Service, every pod connected", headless: true, pods: []pod{{Calls: map[int]float64{0: 1, 1: 1, 2: 1}}, {Calls: map[int]float64{3: 1}}}, clients: 4,
			verdict: diagnose.Unknown, cause: "connections-only"},
		{name: "client sidecars, every pod connected", pods: spread(4, 2, 1), clients: 2, sidecars: true,
			verdict: diagnose.Unknown, cause: "l7-proxy"},
		{name: "a connection opened during the window, seen in two readings", pods: []pod{{Calls: map[int]float64{0: 1}}, {}, {}}, clients: 1, late: true,
			verdict: diagnose.Unknown, cause: "rotating-connections", why: "1 client holds 1 busy connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := evidencetest.Build(tc.headless, tc.pods, tc.clients, nil)
			if tc.sidecars {
				ev = evidencetest.WithClientContainers(evidencetest.Build(tc.headless, tc.pods, tc.clients, map[string]string{"sidecar.istio.io/status": "{}"}), "order", "istio-proxy")
			}
			ev = evidencetest.AsConnections(ev)
			if tc.late {
				// 6 readings 1 s apart; the connection first seen at the
				// fifth: its life from the fourth to the sixth, 2 s, open
				// 1 s of it as exec counts.
				ev.Readings = 6
				for i := range ev.Pods {
					for k := range ev.Pods[i].Conns {
						c := &ev.Pods[i].Conns[k]
						c.New, c.Life, c.Calls, c.Total = true, 2*time.Second, 1000, 1000
						ev.Pods[i].Calls.Started = 1000
					}
				}
			}
			r := diagnose.Diagnose(ev)
			if r.Verdict != tc.verdict || r.Cause != tc.cause || !strings.Contains(r.Why, tc.why) {
				t.Errorf("verdict %s (%s), want %s (%s) saying %q: %s", r.Verdict, r.Cause, tc.verdict, tc.cause, tc.why, r.Why)
			}
			if r.Rates.Unit != "connections" || r.Rates.BusyAbove != diagnose.MinConnOpen {
				t.Errorf("unit %q above %v, want connections above MinConnOpen", r.Rates.Unit, r.Rates.BusyAbove)
			}
		})
	}
}
