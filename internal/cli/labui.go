package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/dashboard"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// DefaultUIAddr is where lab run --ui serves its dashboard: a free port on
// 127.0.0.1.
const DefaultUIAddr = "127.0.0.1:0"

// dashboardURL is the address a user opens: the page, with the token in
// the fragment, which the browser keeps to itself.
func dashboardURL(addr, token string) string { return "http://" + addr + "/#token=" + token }

// liveUI is lab run's dashboard: a board and the control API server that
// serves it (with no lab behind it: its /v1/ calls answer 503).
type liveUI struct {
	board  *dashboard.Board
	srv    *control.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startUI serves a dashboard for plan p on opts.UIAddr and prints its
// address; nil without --ui.
func startUI(ctx context.Context, opts *LabRunOptions, p *plan.Plan) (*liveUI, error) {
	if !opts.UI {
		return nil, nil
	}
	cfg := dashboard.Config{Title: "pinlab lab run: " + p.Name}
	for _, v := range p.Variants {
		panel := dashboard.Panel{Name: v.Name, Description: v.Description, Duration: p.Duration}
		for _, st := range v.Steps {
			panel.Steps = append(panel.Steps, dashboard.Step{At: st.At, Text: st.Describe()})
		}
		for _, w := range p.Windows {
			panel.Windows = append(panel.Windows, dashboard.Window{Name: w.Name, From: w.From, To: w.To})
		}
		cfg.Panels = append(cfg.Panels, panel)
	}
	ui := &liveUI{board: dashboard.New(cfg)}
	var ln net.Listener
	if netns.Inside() {
		// lab run --control-plane kubernetes: the pinlab on the host bound
		// the dashboard's address (listenUI) and handed it over.
		var err error
		if ln, err = inheritedListener(uiFD, "dashboard"); err != nil {
			return nil, err
		}
	} else {
		var err error
		if ln, err = listenUI(ctx, opts.UIAddr); err != nil {
			return nil, err
		}
	}
	token := control.NewToken()
	srv, err := control.Listen(ctx, control.Config{Addr: ln.Addr().String(), Listener: ln, Token: token, UI: ui.board.Handler()})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("--ui-addr %s: %w", opts.UIAddr, err)
	}
	ui.srv = srv
	bctx, cancel := context.WithCancel(context.Background())
	ui.cancel = cancel
	ui.wg.Go(func() { ui.board.Run(bctx) })
	fmt.Fprintf(opts.Err, "dashboard: %s\n", dashboardURL(srv.Addr(), token))
	return ui, nil
}

// uiFD is the descriptor of the dashboard's listener that lab run
// --control-plane kubernetes hands to itself in its network namespace.
const uiFD = 3

// listenUI binds lab run's dashboard address on the host's loopback.
func listenUI(ctx context.Context, addr string) (net.Listener, error) {
	ln, err := loopback.Listen(ctx, addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			err = fmt.Errorf("%w (pass --ui-addr 127.0.0.1:0 for a free port)", err)
		}
		return nil, fmt.Errorf("--ui-addr %s: %w", addr, err)
	}
	return ln, nil
}

// finish shows the result's headlines, ends the page's stream and stops
// serving; nil does nothing.
func (u *liveUI) finish(res *report.Result) {
	if u == nil {
		return
	}
	lines := []string{"The run is over."}
	if res != nil {
		lines = append(lines, report.Headlines(res)...)
	}
	u.board.Finish(lines)
	u.cancel()
	u.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	u.srv.Shutdown(ctx)
}

// progress returns the runner's Progress for the progress line and the
// dashboard, either of which may be nil.
func progress(line func([]runner.Progress), u *liveUI) func([]runner.Progress) {
	switch {
	case u == nil:
		return line
	case line == nil:
		return u.board.Progress
	}
	return func(ps []runner.Progress) {
		line(ps)
		u.board.Progress(ps)
	}
}

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
		if count(kind, o) == 0 {
			continue
		}
		header, rows := kindRows(kind, o)
		out = append(out, dashboard.Table{Kind: kind, Header: strings.Split(header, "\t"), Rows: sortRows(rows)})
	}
	return out
}

// configure makes the lab's kubelet report to the board.
func (lb *labBoard) configure(cfg *lab.Config) {
	cfg.Kubelet.Observe = func(p *corev1.Pod) pod.Observer { return podCalls{board: lb.board, name: p.Name} }
	cfg.Kubelet.Events = func(p *corev1.Pod, event string, at time.Time) {
		lb.board.Event(0, runner.LiveEvent{At: at, Pod: p.Name, IP: p.Status.PodIP, Text: event})
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
	w.board.Event(0, runner.LiveEvent{At: time.Now(), Pod: p.Name, IP: p.Status.PodIP, Phase: ph})
}
