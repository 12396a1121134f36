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

// The adversarial set: cases written as a new user meets them on a real
// cluster (own manifests, pools, meshes, probes, StatefulSets, twin
// Services), each with the verdict a careful engineer would give. A
// verdict other than the one wanted fails, and so does any confident
// verdict (pinned or balanced) where "could not tell" is wanted.

// probed adds probe calls (1 per second per pod, on connections opened
// per call) to every pod of ev.
func probed(ev evidence.Evidence) evidence.Evidence {
	for i := range ev.Pods {
		ev = evidencetest.WithProbes(ev, i, 1)
	}
	return ev
}

// rotatingOver sets ev's window and makes every connection one that
// opened during it and lived life, carrying its rate over that life.
func rotatingOver(ev evidence.Evidence, window, life time.Duration) evidence.Evidence {
	scale := life.Seconds() / ev.Window.Seconds()
	ev.Window = window
	for i := range ev.Pods {
		var started int64
		for j := range ev.Pods[i].Conns {
			c := &ev.Pods[i].Conns[j]
			c.Calls = int64(float64(c.Calls) * scale)
			c.New, c.Life = true, life
			started += c.Calls
		}
		ev.Pods[i].Calls.Started, ev.Pods[i].Calls.Succeeded = started, started
	}
	return ev
}

// pooled: client 0 holds 4 connections through a ClusterIP (one address,
// a pool of channels), 4 pods added later.
func pooled() []pod {
	pods := []pod{{Calls: map[int]float64{0: 100}}, {Calls: map[int]float64{0: 100}}, {Calls: map[int]float64{0: 100}}, {Calls: map[int]float64{0: 100}}}
	for range 4 {
		pods = append(pods, pod{Added: true})
	}
	return pods
}

// behindNode: the node's address holds 3 busy connections (clients
// SNATed by the node, or hostNetwork clients).
func behindNode() []pod {
	return []pod{{Calls: map[int]float64{-1: 100}}, {Calls: map[int]float64{-1: 100}}, {}, {}, {}}
}

// statefulSet makes ev's headless Service the serviceName of a
// StatefulSet.
func statefulSet(ev evidence.Evidence) evidence.Evidence {
	ev.Service.Workloads = []evidence.Workload{{Kind: "StatefulSet", Name: "pricing", Replicas: int32(len(ev.Pods)), ServiceName: ev.Service.Name}}
	return ev
}

// governedBy gives ev's Service a StatefulSet whose serviceName is name.
func governedBy(ev evidence.Evidence, name string) evidence.Evidence {
	ev.Service.Workloads = []evidence.Workload{{Kind: "StatefulSet", Name: "pricing", Replicas: int32(len(ev.Pods)), ServiceName: name}}
	return ev
}

// twin gives ev's Service a sibling of the other kind.
func twin(ev evidence.Evidence) evidence.Evidence {
	s := evidence.Service{Namespace: "shop", Name: "pricing-headless", Type: "ClusterIP", ClusterIP: "None"}
	if ev.Service.Headless() {
		s = evidence.Service{Namespace: "shop", Name: "pricing", Type: "ClusterIP", ClusterIP: "127.96.0.20"}
	}
	ev.Siblings = append(ev.Siblings, s)
	return ev
}

// gateway makes client 0 an endpoint of Service edge/gateway.
func gateway(ev evidence.Evidence) evidence.Evidence {
	ev.Peers[evidencetest.ClientIP(0)] = evidence.Peer{Kind: "endpoint", Namespace: "edge", Name: "gateway"}
	return ev
}

// loose: calls on connections no reading saw (a client opening one per
// call), rate per pod.
func loose(n int, rate float64) evidence.Evidence {
	ev := evidencetest.Build(false, make([]pod, n), 0, nil)
	for i := range ev.Pods {
		ev = evidencetest.WithProbes(ev, i, rate)
	}
	return ev
}

// reconnected: client 0's connection to pod 0 closed mid-window and a
// new one (to pod 0 again) carried the rest.
func reconnected(ev evidence.Evidence) evidence.Evidence {
	c := ev.Pods[0].Conns[0]
	old, fresh := c, c
	old.Calls, old.Closed, old.Life = c.Calls/2, true, ev.Window/2
	fresh.Remote, fresh.Calls, fresh.New, fresh.Life = "127.244.1.0:50000", c.Calls/2, true, ev.Window/2
	ev.Pods[0].Conns = []evidence.Conn{old, fresh}
	return ev
}

// blip adds to pod i a connection from client 0 that carried one call and
// was seen for 20 ms (a reading that ran late).
func blip(ev evidence.Evidence, i int) evidence.Evidence {
	ev.Readings = 6
	ev.Pods[i].Conns = append(ev.Pods[i].Conns, evidence.Conn{Remote: "127.244.1.9:1", Calls: 1, Total: 1, New: true, Life: 20 * time.Millisecond})
	ev.Pods[i].Calls.Started++
	return ev
}

// lateRead makes pod i read only over the last fifth of the window: its
// calls are a fifth of the others' at the same rate.
func lateRead(ev evidence.Evidence, i int) evidence.Evidence {
	p := &ev.Pods[i]
	p.Span = ev.Window / 5
	p.Calls.Started /= 5
	p.Calls.Succeeded /= 5
	for j := range p.Conns {
		p.Conns[j].Calls /= 5
		p.Conns[j].Life = p.Span
	}
	return ev
}

func TestAdversarial(t *testing.T) {
	one := func(n int) []pod { // client 0 on pod 0 at 2 calls/s, n pods
		pods := []pod{{Calls: map[int]float64{0: 2}}}
		for range n - 1 {
			pods = append(pods, pod{})
		}
		return pods
	}
	three := func() []pod { // 3 clients on 3 of 10 pods
		pods := []pod{{Calls: map[int]float64{0: 50}}, {Calls: map[int]float64{1: 50}}, {Calls: map[int]float64{2: 50}}}
		for range 7 {
			pods = append(pods, pod{})
		}
		return pods
	}
	linkerd := map[string]string{"linkerd.io/proxy-version": "stable-2.14.10"}
	tests := []struct {
		name    string
		ev      evidence.Evidence
		verdict diagnose.Verdict
		cause   string
		why     string // a part of Why
		notWhy  string // must not be in Why
		fix     string // the first fix's name, if any
	}{
		// Probes on every pod must not read as traffic.
		{name: "1 client, 2 calls/s, 40-pod headless, probes everywhere", ev: probed(evidencetest.Build(true, one(40), 1, nil)),
			verdict: diagnose.Pinned, cause: "headless-pick-first", why: "39 of 40 ready pods idle"},
		{name: "3 clients on 3 of 10 pods, probes everywhere", ev: probed(evidencetest.Build(false, three(), 3, nil)),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "7 of 10 ready pods idle"},
		{name: "only probes", ev: probed(evidencetest.Build(false, make([]pod, 5), 0, nil)),
			verdict: diagnose.Unknown, cause: "no-calls", why: "5.0 calls/s of probes"},
		// Pools and shared addresses through a ClusterIP are kube-proxy's
		// per-connection picks, not a stale DNS resolution.
		{name: "a pool of 4 channels through a ClusterIP, then a scale-out", ev: evidencetest.Build(false, pooled(), 1, nil),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "order-0 holds 4 busy connections from one address (a pool of channels", notWhy: "DNS resolution"},
		{name: "clients behind the node's address", ev: evidencetest.Build(false, behindNode(), 0, nil),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "node pinlab-node holds 2 busy connections from one address (a pool of channels, or several clients behind one address (a node's SNAT"},
		// Busy is judged per client and over each connection's life.
		{name: "6 round_robin clients x 9 calls/s over 10 pods", ev: evidencetest.Build(true, spread(10, 6, 0.9), 6, nil),
			verdict: diagnose.Balanced, why: "0 of 10 ready pods idle"},
		{name: "MaxConnectionAge 10s read over a 40s window", ev: rotatingOver(evidencetest.Build(false, spread(4, 4, 20), 4, nil), 40*time.Second, 10*time.Second),
			verdict: diagnose.Balanced, why: "connections rotate"},
		{name: "a client below the busy threshold", ev: evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 1}}, {}, {}}, 1, nil),
			verdict: diagnose.Unknown, cause: "no-clients"},
		{name: "clients opening a connection per call", ev: loose(4, 50),
			verdict: diagnose.Unknown, cause: "no-clients", why: "opened and closed between two readings"},
		// Meshes: an annotation is a hint; a sidecar proves a proxy only by
		// spreading the calls; a proxy that is there is never recommended.
		{name: "Linkerd annotation, one connection each", ev: evidencetest.Build(false, pinnedPods(), 4, linkerd),
			verdict: diagnose.Pinned, cause: "clusterip-connection", fix: "headless Service + round_robin + re-resolution"},
		{name: "Linkerd proxy bypassed", ev: evidencetest.WithClientContainers(evidencetest.Build(false, pinnedPods(), 4, linkerd), "order", "linkerd-proxy"),
			verdict: diagnose.Pinned, cause: "clusterip-connection", fix: "headless Service + round_robin + re-resolution"},
		{name: "peak_ewma sidecars favour fast pods", ev: evidencetest.WithClientContainers(evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 300, 1: 300}}, {Calls: map[int]float64{0: 100, 1: 100}}, {Calls: map[int]float64{0: 3, 1: 3}}}, 2, linkerd), "order", "linkerd-proxy"),
			verdict: diagnose.Unknown, cause: "l7-proxy", notWhy: "holds no"},
		{name: "a gateway in front, balanced", ev: gateway(evidencetest.Build(false, spread(4, 1, 100), 1, nil)),
			verdict: diagnose.Balanced, why: "an L7 proxy in the path"},
		{name: "inbound sidecars only", ev: evidencetest.Build(false, []pod{{Calls: map[int]float64{-2: 400}}, {Calls: map[int]float64{-2: 20}}}, 0, nil),
			verdict: diagnose.Unknown, cause: "inbound-proxy"},
		// Per-pod addressing and twin Services.
		{name: "StatefulSet pods dialled by name", ev: statefulSet(evidencetest.Build(true, []pod{{Calls: map[int]float64{0: 100}}, {Calls: map[int]float64{1: 100}}, {}}, 2, nil)),
			verdict: diagnose.Unknown, cause: "per-pod-addressing", why: "the clients' target"},
		{name: "ClusterIP diagnosed, headless twin", ev: twin(evidencetest.Build(false, pinnedPods(), 4, nil)),
			verdict: diagnose.Pinned, cause: "clusterip-connection", why: "pricing-headless (headless) also selects these pods"},
		{name: "headless diagnosed, ClusterIP twin", ev: twin(evidencetest.Build(true, pinnedPods(), 4, nil)),
			verdict: diagnose.Pinned, cause: "headless-pick-first", why: "through a ClusterIP kube-proxy picks a pod once per connection"},
		{name: "ClusterIP diagnosed, its headless twin a StatefulSet's", ev: governedBy(twin(evidencetest.Build(false, []pod{{Calls: map[int]float64{0: 100}}, {Calls: map[int]float64{1: 100}}, {}}, 2, nil)), "pricing-headless"),
			verdict: diagnose.Unknown, cause: "per-pod-addressing"},
		// Reconnects, late readings and pods read in fewer rounds.
		{name: "a pick_first client that reconnected once", ev: reconnected(evidencetest.Build(true, pinnedPods(), 4, nil)),
			verdict: diagnose.Pinned, cause: "headless-pick-first"},
		{name: "one call on a connection seen for 20 ms", ev: blip(evidencetest.Build(false, []pod{{}, {}, {}}, 0, nil), 1),
			verdict: diagnose.Unknown, cause: "no-clients"},
		{name: "a balanced pod read only late in the window", ev: lateRead(evidencetest.Build(true, spread(4, 2, 50), 2, nil), 3),
			verdict: diagnose.Balanced},
		// Pods that could not be read are never counted balanced.
		{name: "2 new pods unread", ev: evidencetest.Build(true, append(spread(4, 2, 50), pod{Added: true, Err: "refused"}, pod{Added: true, Err: "refused"}), 2, nil),
			verdict: diagnose.Unknown, cause: "unread-pods"},
		{name: "round_robin, pods added after the last resolution", ev: probed(evidencetest.Build(true, append(spread(3, 2, 100), pod{Added: true}, pod{Added: true}), 2, nil)),
			verdict: diagnose.Pinned, cause: "added-after-resolution"},
	}
	for _, tt := range tests {
		// The same evidence as exec reads it (which connections are open,
		// no traffic): never balanced, and pinned only where a ready pod
		// holds no client connection.
		t.Run("exec/"+tt.name, func(t *testing.T) {
			r := diagnose.Diagnose(evidencetest.AsConnections(tt.ev))
			idle := slices.ContainsFunc(r.Rates.Pods, func(p diagnose.PodRate) bool { return p.Idle })
			if r.Verdict == diagnose.Balanced || r.Verdict == diagnose.Pinned && !idle {
				t.Errorf("from connections alone: verdict %q (%s), an idle pod: %v\nwhy: %s", r.Verdict, r.Cause, idle, r.Why)
			}
		})
		t.Run(tt.name, func(t *testing.T) {
			r := diagnose.Diagnose(tt.ev)
			if r.Verdict != tt.verdict || r.Cause != tt.cause {
				t.Errorf("verdict %q, cause %q; want %q, %q\nwhy: %s", r.Verdict, r.Cause, tt.verdict, tt.cause, r.Why)
			}
			if !strings.Contains(r.Why, tt.why) || tt.notWhy != "" && strings.Contains(r.Why, tt.notWhy) {
				t.Errorf("why: %s\nwant it to contain %q and not %q", r.Why, tt.why, tt.notWhy)
			}
			if tt.fix != "" && (len(r.Fixes) == 0 || r.Fixes[0].Name != tt.fix) {
				t.Errorf("fixes %+v; want %q first", r.Fixes, tt.fix)
			}
			for _, f := range r.Fixes {
				if r.Path.Proxy && f.Name == "an L7 proxy (mesh sidecar or gateway)" {
					t.Errorf("recommends an L7 proxy, which is in the path: %+v", r.Path)
				}
			}
		})
	}
}
