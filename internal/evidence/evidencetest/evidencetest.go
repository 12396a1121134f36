// Package evidencetest builds evidence.Evidence values for the tests of
// diagnose and report: a Service, its pods with the calls each client
// sent them over the window, and the client pods as peers.
package evidencetest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
)

// Window is the window of every Evidence built here.
const Window = 5 * time.Second

// Epoch is the creation time of the first pods; AddedAt that of pods
// marked Added.
var (
	Epoch   = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	AddedAt = Epoch.Add(10 * time.Minute)
)

// Pod describes one server pod: Calls maps a client index to the calls
// per second it sent the pod over one connection (a client index of -1
// is the node, -2 an inbound sidecar at 127.0.0.6).
type Pod struct {
	Added bool
	Calls map[int]float64
	Err   string
}

// Build returns the Evidence of Service shop/pricing (headless when
// headless) with pods pricing-0.. at 127.244.0.10+i and clients order-0..
// at 127.244.1.i; clientAnnotations, if not nil, go on every client pod.
func Build(headless bool, pods []Pod, clients int, clientAnnotations map[string]string) evidence.Evidence {
	svc := evidence.Service{Namespace: "shop", Name: "pricing", Type: "ClusterIP", ClusterIP: "127.96.0.20", Ports: []int32{8471}, Selector: map[string]string{"app": "pricing"}}
	if headless {
		svc.Name, svc.ClusterIP = "pricing-headless", "None"
	}
	ev := evidence.Evidence{Source: "lab at 127.0.0.1:7471", RatesFrom: "channelz", Service: svc, Window: Window, Peers: map[string]evidence.Peer{}}
	for i := range clients {
		ev.Peers[ClientIP(i)] = evidence.Peer{Kind: "pod", Namespace: "shop", Name: fmt.Sprintf("order-%d", i), Containers: []string{"order"}, Annotations: clientAnnotations}
	}
	ev.Peers["127.0.0.1"] = evidence.Peer{Kind: "node", Name: "pinlab-node"}
	for i, p := range pods {
		ep := evidence.Pod{Name: fmt.Sprintf("pricing-%d", i), IP: fmt.Sprintf("127.244.0.%d", 10+i), Ready: true, Created: Epoch, Containers: []string{"pricing"}, Err: p.Err}
		if p.Added {
			ep.Created = AddedAt
		}
		ep.Addr = ep.IP + ":8471"
		svc.Endpoints++
		svc.Ready++
		var total int64
		for c, rate := range p.Calls {
			n := int64(rate * Window.Seconds())
			total += n
			ep.Conns = append(ep.Conns, evidence.Conn{Remote: fmt.Sprintf("%s:%d", clientAddr(c), 40000+i), Calls: n, Total: 10 * n})
		}
		slices.SortFunc(ep.Conns, func(a, b evidence.Conn) int { return strings.Compare(a.Remote, b.Remote) })
		if p.Err == "" {
			ep.Calls = evidence.Calls{Started: total, Succeeded: total}
		} else {
			ev.Problems = append(ev.Problems, fmt.Sprintf("pod %s: %s", ep.Name, p.Err))
		}
		ev.Pods = append(ev.Pods, ep)
	}
	ev.Service = svc
	return ev
}

// AsConnections turns ev into evidence read through exec (RatesFrom
// "exec", Unit evidence.UnitConnMs): each connection with calls was open
// the whole window, one without none of it; no calls are counted, and
// returns the result (ev's pods are copied, not changed).
func AsConnections(ev evidence.Evidence) evidence.Evidence {
	ev.RatesFrom, ev.Unit = "exec", evidence.UnitConnMs
	ev.Pods = slices.Clone(ev.Pods) // ev's caller keeps its own
	for i := range ev.Pods {
		p := &ev.Pods[i]
		p.Conns = slices.Clone(p.Conns)
		p.Calls = evidence.Calls{}
		for k := range p.Conns {
			c := &p.Conns[k]
			if c.Calls > 0 {
				c.Calls = ev.Window.Milliseconds()
			}
			c.Total = c.Calls
			p.Calls.Started += c.Calls
		}
	}
	return ev
}

// ClientIP is client i's pod IP.
func ClientIP(i int) string { return fmt.Sprintf("127.244.1.%d", i) }

func clientAddr(c int) string {
	switch c {
	case -1:
		return "127.0.0.1"
	case -2:
		return "127.0.0.6"
	}
	return ClientIP(c)
}

// WithClientContainers gives every client pod of ev (the pod peers named
// order-N) these containers, a sidecar's say, and returns ev.
func WithClientContainers(ev evidence.Evidence, containers ...string) evidence.Evidence {
	for ip, p := range ev.Peers {
		if p.Kind == "pod" && strings.HasPrefix(p.Name, "order-") {
			p.Containers = containers
			ev.Peers[ip] = p
		}
	}
	return ev
}

// WithProbes adds to pod i of ev calls per second that arrived on no
// connection a reading saw (probes that open a connection per call, or
// short-lived clients), and returns ev.
func WithProbes(ev evidence.Evidence, i int, perSec float64) evidence.Evidence {
	n := int64(perSec * ev.Window.Seconds())
	ev.Pods[i].Calls.Started += n
	ev.Pods[i].Calls.Succeeded += n
	return ev
}

// AsBytes turns ev into an agent's evidence (RatesFrom "agent", Unit
// "bytes"): every count, calls per second as Build took them, now reads
// as bytes per second, and returns ev.
func AsBytes(ev evidence.Evidence) evidence.Evidence {
	ev.RatesFrom, ev.Unit = "agent", "bytes"
	for i := range ev.Pods {
		ev.Pods[i].Calls.Succeeded = 0
	}
	return ev
}
