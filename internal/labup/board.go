package labup

import (
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/dashboard"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// labBoard is lab up's dashboard: one panel for the lab, fed by the
// kubelet (calls served, connections) and the pod informer, and the lab's
// objects as lab get shows them.
type labBoard struct {
	board *dashboard.Board
	lab   atomic.Pointer[lab.Lab]
	pods  *podWatch
}

func newLabBoard(title string) *labBoard {
	lb := &labBoard{}
	lb.board = dashboard.New(dashboard.Config{Title: title, Panels: []dashboard.Panel{{Name: "lab"}}, Objects: lb.objects})
	lb.pods = &podWatch{board: lb.board, state: map[types.UID]podFlags{}}
	return lb
}

// objects are the lab's objects, once it is up.
func (lb *labBoard) objects() []dashboard.Table {
	l := lb.lab.Load()
	if l == nil {
		return nil
	}
	o := control.Snapshot(l)
	var out []dashboard.Table
	for _, kind := range []string{"Service", "Pod", "EndpointSlice", "Deployment", "StatefulSet"} {
		if control.Count(kind, o) == 0 {
			continue
		}
		header, rows := control.Rows(kind, o)
		out = append(out, dashboard.Table{Kind: kind, Header: strings.Split(header, "\t"), Rows: rows})
	}
	return out
}

// configure makes the lab's kubelet report to the board.
func (lb *labBoard) configure(cfg *lab.Config) {
	cfg.Kubelet.Observe = func(p *corev1.Pod) pod.Observer { return podCalls{board: lb.board, name: p.Name} }
	cfg.Kubelet.Events = func(p *corev1.Pod, event string, at time.Time) {
		lb.board.Event(0, outcome.LiveEvent{At: at, Pod: p.Name, IP: p.Status.PodIP, Text: event})
	}
}

// podCalls counts what a pod of lab up serves: pricing calls (gRPC, HTTP
// and WebSocket), as lab run counts them, not the kubelet's probes; and
// connections by the client's address.
type podCalls struct {
	board *dashboard.Board
	name  string
}

func (o podCalls) Served(_ netip.AddrPort, method string, code codes.Code) {
	if code == codes.OK && (strings.HasPrefix(method, "/pricing.v1.Pricing/") || method == webapi.RoutePrice || method == webapi.RouteWatchMessage) {
		o.board.Served(0, o.name)
	}
}

func (o podCalls) Conn(peer netip.AddrPort, open bool) { o.board.Conn(0, peer.Addr().String(), open) }

// podWatch tells the board of pod changes the informer sees: created,
// Ready turning true or false, terminating, deleted.
type podWatch struct {
	board *dashboard.Board
	mu    sync.Mutex
	state map[types.UID]podFlags
}

type podFlags struct{ seen, ready, terminating bool }

func (w *podWatch) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    w.update,
		UpdateFunc: func(_, cur any) { w.update(cur) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.mu.Lock()
				delete(w.state, p.UID)
				w.mu.Unlock()
				w.event(p, stats.PodDeleted)
			}
		},
	}
}

func (w *podWatch) update(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.state[p.UID]
	cur := podFlags{seen: true, ready: cluster.IsPodReady(p), terminating: p.DeletionTimestamp != nil}
	if !old.seen {
		w.event(p, stats.PodCreated)
	}
	if cur.ready != old.ready {
		ph := stats.PodNotReady
		if cur.ready {
			ph = stats.PodReady
		}
		w.event(p, ph)
	}
	if cur.terminating && !old.terminating {
		w.event(p, stats.PodTerminating)
	}
	w.state[p.UID] = cur
}

func (w *podWatch) event(p *corev1.Pod, ph stats.PodPhase) {
	w.board.Event(0, outcome.LiveEvent{At: time.Now(), Pod: p.Name, IP: p.Status.PodIP, Phase: ph})
}
