package labrun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/dashboard"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/runner"
)

// DashboardURL is the address a user opens: the page, with the token in
// the fragment, which the browser keeps to itself.
func DashboardURL(addr, token string) string { return "http://" + addr + "/#token=" + token }

// liveUI is lab run's dashboard: a board and the control API server that
// serves it (with no lab behind it: its /v1/ calls answer 503). A nil
// *liveUI is no dashboard: its methods do nothing.
type liveUI struct {
	board  *dashboard.Board
	srv    *control.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// stopTimeout bounds how long stopping the dashboard's server waits for
// the requests in progress.
const stopTimeout = 5 * time.Second

// startUI serves a dashboard for plan p on opts.UIAddr (inside the
// network namespace, on the listener the host handed over) and says its
// address, with a new token, on opts.Notes; nil without opts.UI.
func startUI(ctx context.Context, opts Options, p *plan.Plan) (*liveUI, error) {
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
	var err error
	if kubelab.OnHost() {
		ln, err = listenUI(ctx, opts.UIAddr)
	} else {
		// On a real control plane: the command on the host bound the
		// dashboard's address (runOnHost) and handed it over.
		ln, err = kubelab.Inherited(uiFD, "dashboard")
	}
	if err != nil {
		return nil, err
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
	note(opts.Notes, "dashboard: %s", DashboardURL(srv.Addr(), token))
	return ui, nil
}

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

// progress is the runner's Progress: line (nil: none) and the dashboard.
func (u *liveUI) progress(line func([]outcome.Progress)) func([]outcome.Progress) {
	switch {
	case u == nil:
		return line
	case line == nil:
		return u.board.Progress
	}
	return func(ps []outcome.Progress) {
		line(ps)
		u.board.Progress(ps)
	}
}

// live is the runner's Live: the dashboard's board, or nil.
func (u *liveUI) live() runner.Live {
	if u == nil {
		return nil
	}
	return u.board
}

// finish shows the result's headlines (none when res is nil), ends the
// page's stream and stops serving.
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
