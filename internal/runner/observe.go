package runner

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/proxy"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// tracker decides which pods a run measures: those behind the clients'
// target Services (other workloads of the file are not counted in shares
// and fairness). With no selector among the targets (hand-written
// EndpointSlices), every pod is.
type tracker []plan.Target

// services returns the target Services ("namespace/name") pod p backs, and
// whether the run measures it.
func (t tracker) services(p *corev1.Pod) ([]string, bool) {
	var out []string
	selectors := 0
	for _, target := range t {
		if len(target.Selector) == 0 {
			continue
		}
		selectors++
		if p.Namespace == target.Namespace && labels.SelectorFromSet(target.Selector).Matches(labels.Set(p.Labels)) {
			out = append(out, target.Key())
		}
	}
	return out, selectors == 0 || len(out) > 0
}

// observer returns the kubelet's Observe hook: what tracked pods serve.
func (t tracker) observer(rec *stats.Recorder, live tap) func(*corev1.Pod) pod.Observer {
	return func(p *corev1.Pod) pod.Observer {
		if _, ok := t.services(p); !ok {
			return nil
		}
		return podObserver{rec: rec, name: p.Name, tap: live}
	}
}

// webCalls are the routes of the pods' HTTP/1.1 and WebSocket server that
// count as calls (the pod server reports them so).
var webCalls = map[string]bool{webapi.RoutePrice: true, webapi.RouteWatchMessage: true}

// podObserver records what one pod served; only pricing calls count, so
// kubelet health probes do not.
type podObserver struct {
	rec  *stats.Recorder
	name string
	tap  tap
}

func (o podObserver) Served(peer netip.AddrPort, method string, code codes.Code) {
	if code == codes.OK && (strings.HasPrefix(method, "/pricing.v1.Pricing/") || webCalls[method]) {
		o.rec.Served(o.name, peer.Addr(), time.Now())
		o.tap.served(o.name)
	}
}

func (o podObserver) Conn(peer netip.AddrPort, open bool) {
	o.rec.PodConn(o.name, peer, open, time.Now())
}

// clientObserver records one load client's calls and connections.
type clientObserver struct {
	rec  *stats.Recorder
	name string
	tap  tap
}

// Sent records the schedule lag of a call as it is launched.
func (o clientObserver) Sent(due time.Time, lag time.Duration) { o.rec.Lag(o.name, due, lag) }

func (o clientObserver) Called(r load.Result) {
	o.rec.Call(o.name, r.Pod, r.Code, string(r.Cause), r.Latency, r.Due)
}

// Conn records a connection opening or closing, with why it closed and when
// a GOAWAY arrived on it, as the client observed them.
func (o clientObserver) Conn(ev load.ConnEvent) {
	at := time.Now()
	if !ev.GoAwayAt.IsZero() {
		o.rec.ClientGoAway(o.name, ev.Remote, ev.GoAwayAt)
	}
	o.rec.ClientConn(o.name, ev.Remote, ev.Open, string(ev.Reason), at)
	o.tap.conn(o.name, ev.Open)
}

func dnsObserver(rec *stats.Recorder) func(clusterdns.QueryEvent) {
	return func(ev clusterdns.QueryEvent) {
		q := stats.DNSQuery{Name: ev.Name, Type: dns.TypeToString[ev.Type], Rcode: dns.RcodeToString[ev.Rcode], Answers: ev.Answers}
		if ev.Client != nil {
			q.Client = ev.Client.String()
		}
		rec.DNS(q, ev.Time)
	}
}

func proxyObserver(rec *stats.Recorder) func(proxy.Conn, proxy.ConnEvent) {
	return func(c proxy.Conn, ev proxy.ConnEvent) {
		switch ev {
		case proxy.ConnOpened:
			rec.ProxyConnOpened(c.Client, c.VIP.String(), c.Endpoint.String(), c.Pod, c.Opened)
		case proxy.ConnClosed:
			rec.ProxyConnClosed(c.Client, c.VIP.String(), time.Now())
		}
	}
}

func podEvents(rec *stats.Recorder, live tap) func(*corev1.Pod, string, time.Time) {
	return func(p *corev1.Pod, event string, at time.Time) {
		rec.PodEvent(p.Name, event, at)
		live.event(outcome.LiveEvent{At: at, Pod: p.Name, IP: p.Status.PodIP, Text: event})
	}
}

// podPhases turns pod informer events into lifecycle records: created,
// ready / not-ready, terminating, deleted.
type podPhases struct {
	rec     *stats.Recorder
	tracker tracker
	tap     tap

	mu    sync.Mutex
	state map[types.UID]podState
}

type podState struct {
	ready, terminating bool
}

func newPodPhases(rec *stats.Recorder, t tracker, live tap) *podPhases {
	return &podPhases{rec: rec, tracker: t, tap: live, state: map[types.UID]podState{}}
}

// phase records a pod's phase and tells the live view.
func (p *podPhases) phase(pod *corev1.Pod, ph stats.PodPhase, at time.Time) {
	p.rec.PodPhase(pod.Name, pod.Status.PodIP, ph, at)
	p.tap.event(outcome.LiveEvent{At: at, Pod: pod.Name, IP: pod.Status.PodIP, Phase: ph})
}

func (p *podPhases) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    p.update,
		UpdateFunc: func(_, cur any) { p.update(cur) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			if _, tracked := p.tracker.services(pod); tracked {
				p.mu.Lock()
				delete(p.state, pod.UID)
				p.mu.Unlock()
				p.phase(pod, stats.PodDeleted, time.Now())
			}
		},
	}
}

func (p *podPhases) update(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	services, tracked := p.tracker.services(pod)
	if !tracked {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old, seen := p.state[pod.UID]
	now := time.Now()
	if !seen {
		p.rec.PodServices(pod.Name, services)
		p.phase(pod, stats.PodCreated, pod.CreationTimestamp.Time)
	}
	cur := podState{ready: cluster.IsPodReady(pod), terminating: pod.DeletionTimestamp != nil}
	if cur.ready != old.ready {
		ph := stats.PodNotReady
		if cur.ready {
			ph = stats.PodReady
		}
		p.phase(pod, ph, now)
	}
	if cur.terminating && !old.terminating {
		p.phase(pod, stats.PodTerminating, now)
	}
	p.state[pod.UID] = cur
}

var _ pod.Observer = podObserver{}
var _ load.Observer = clientObserver{}
var _ load.LagObserver = clientObserver{}
