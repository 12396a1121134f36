package pod

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/workload"
)

// ProcessConfig configures a container's process: its gRPC server and,
// for a pod with an HTTP port, its web server (nil otherwise).
type ProcessConfig struct {
	GRPC Config
	Web  *WebConfig
}

// Process is a container's process: the pod's gRPC server (Server)
// and, for a pod with an HTTP port, its HTTP/1.1 and WebSocket server
// (WebServer) on the same pod IP. The two are one process's servers:
// they start together (after the start-up delay), SIGTERM stops both
// gracefully, SIGKILL kills both, and when the gRPC server exits on its own
// (or the web server cannot listen) the whole process ends. Hang and
// SetHealthy reach the gRPC server only (see package kubelet's README.md). Methods are safe
// for concurrent use; Start once, then Stop and Kill as often as needed.
type Process struct {
	grpc  *Server
	web   *WebServer    // nil: no HTTP port
	delay time.Duration // --startup-delay, waited here for both servers
	drain time.Duration // --drain-delay, for the web server's stop

	quit        chan struct{} // closed by Stop, Kill or the process's own end; under mu
	killed      chan struct{} // closed by Kill
	done        chan struct{} // closed once both servers stopped
	quitOnce    sync.Once
	killOnce    sync.Once
	doneOnce    sync.Once
	webKillOnce sync.Once      // runs web.Kill once; later callers wait for it
	starter     sync.WaitGroup // the delayed start of both servers
	watcher     sync.WaitGroup // the goroutine that notices the gRPC server's end

	mu      sync.Mutex
	webUp   bool  // web.Start succeeded
	webStop bool  // web.Stop was called
	webKill bool  // web.Kill was called (or is running)
	hung    bool  // Hang(true) is in effect
	err     error // why the process ended on its own
}

// NewProcess returns the process for cfg; nothing listens until Start.
func NewProcess(cfg ProcessConfig) *Process {
	p := &Process{
		delay: cfg.GRPC.StartupDelay, drain: cfg.GRPC.DrainDelay,
		quit: make(chan struct{}), killed: make(chan struct{}), done: make(chan struct{}),
	}
	cfg.GRPC.StartupDelay = 0 // the process waits, for both servers
	p.grpc = New(cfg.GRPC)
	if cfg.Web != nil {
		p.web = NewWebServer(*cfg.Web)
	}
	return p
}

// Start starts both servers, as Server.Start does: without a start-up
// delay they listen before it returns (an error from either stops both);
// with one Start returns at once and both listen after it (connects are
// refused until then), the web server first, so that it is up once gRPC
// answers; a server that cannot listen then ends the process (Done closes,
// Err says why). Stop or Kill during the delay cancel the listening.
func (p *Process) Start(ctx context.Context) error {
	if p.delay <= 0 {
		if err := p.listen(ctx); err != nil {
			return err
		}
	} else {
		p.starter.Add(1)
		go p.startLater()
	}
	p.watcher.Add(1)
	go p.watch()
	return nil
}

// listen binds both servers, the web server first, unless the process is
// stopping. If the gRPC server cannot listen the web server is killed.
func (p *Process) listen(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.quit:
		return nil
	default:
	}
	if p.web != nil {
		if err := p.web.Start(ctx); err != nil {
			return err
		}
		p.webUp = true
	}
	if err := p.grpc.Start(ctx); err != nil {
		if p.webUp {
			p.webKill = true
			p.webKillOnce.Do(p.web.Kill)
		}
		return err
	}
	return nil
}

// startLater starts both servers after the start-up delay.
func (p *Process) startLater() {
	defer p.starter.Done()
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-p.quit:
		return
	case <-t.C:
	}
	if err := p.listen(context.Background()); err != nil {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		p.grpc.Kill() // watch ends the process
	}
}

// watch ends the process when its gRPC server ended on its own (not by
// Stop or Kill): the web server is killed with it.
func (p *Process) watch() {
	defer p.watcher.Done()
	select {
	case <-p.quit:
		return
	case <-p.grpc.Done():
	}
	select {
	case <-p.quit:
		return // Stop or Kill stopped it; they finish
	default:
	}
	p.closeQuit()
	p.starter.Wait()
	p.killWeb()
	p.doneOnce.Do(func() { close(p.done) })
}

func (p *Process) closeQuit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.quitOnce.Do(func() { close(p.quit) })
}

// finish waits for the process's goroutines and closes done.
func (p *Process) finish() {
	p.starter.Wait()
	p.watcher.Wait()
	p.doneOnce.Do(func() { close(p.done) })
}

// Stop is SIGTERM for both servers, bounded by ctx (the time left before
// SIGKILL): the gRPC server's Stop (health NOT_SERVING, the drain delay,
// GracefulStop) and, beside it, the web server's: after the same drain
// delay (serving normally meanwhile), WebServer.Stop (WebSockets get
// close 1001, http.Server.Shutdown lets requests in flight finish). A hung
// process ignores SIGTERM: both are stopped hard when ctx ends or Kill is
// called. It blocks until both stopped and returns ErrHardStop when
// either did not drain in time.
func (p *Process) Stop(ctx context.Context) error {
	p.closeQuit()
	defer p.finish()
	webErr := make(chan error, 1)
	go func() { webErr <- p.stopWeb(ctx) }()
	err := p.grpc.Stop(ctx)
	if werr := <-webErr; err == nil {
		err = werr
	}
	return err
}

// stopWeb is the web server's part of Stop.
func (p *Process) stopWeb(ctx context.Context) error {
	p.starter.Wait() // no start after this: quit is closed
	p.mu.Lock()
	hung, skip := p.hung, !p.webUp || p.webStop || p.webKill
	p.webStop = true
	p.mu.Unlock()
	if skip {
		return nil
	}
	if err := p.drainWeb(ctx, hung); err != nil {
		p.killWeb()
		return err
	}
	if err := p.web.Stop(ctx); err != nil {
		return fmt.Errorf("web: %w", err)
	}
	select {
	case <-ctx.Done():
		return ErrHardStop
	case <-p.killed:
		return ErrHardStop
	default:
	}
	return nil
}

// drainWeb waits before the web server's graceful stop: the drain delay,
// or, for a hung process, until the end (it ignores SIGTERM). It returns
// ErrHardStop when ctx ended or Kill was called first.
func (p *Process) drainWeb(ctx context.Context, hung bool) error {
	if !hung && p.drain <= 0 {
		return nil
	}
	var drained <-chan time.Time
	if !hung {
		t := time.NewTimer(p.drain)
		defer t.Stop()
		drained = t.C
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
	case <-p.killed:
	}
	return ErrHardStop
}

// Kill is SIGKILL for both servers: connections are reset or closed, calls
// and requests in flight fail. It blocks until both stopped.
func (p *Process) Kill() {
	p.closeQuit()
	p.killOnce.Do(func() { close(p.killed) })
	p.grpc.Kill()
	p.starter.Wait()
	p.killWeb()
	p.finish()
}

// killWeb kills the web server if it runs; concurrent calls all return
// once it is dead.
func (p *Process) killWeb() {
	p.mu.Lock()
	up := p.webUp
	p.webKill = p.webKill || up
	p.mu.Unlock()
	if up {
		p.webKillOnce.Do(p.web.Kill)
	}
}

// Hang hangs or recovers the gRPC server (Server.Hang); the web server
// keeps serving, but a hung process ignores SIGTERM on both.
func (p *Process) Hang(ctx context.Context, hang bool) error {
	if err := p.grpc.Hang(ctx, hang); err != nil {
		return err
	}
	p.mu.Lock()
	p.hung = hang
	p.mu.Unlock()
	return nil
}

// SetReady is Server.SetReady: the gRPC server only.
func (p *Process) SetReady(ok bool) { p.grpc.SetReady(ok) }

// SetHealthy is Server.SetHealthy: the gRPC server only.
func (p *Process) SetHealthy(ok bool) { p.grpc.SetHealthy(ok) }

// Done is closed once the process ended: Stop or Kill returned, or it
// ended on its own (Err says why).
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns why the process ended on its own, or nil.
func (p *Process) Err() error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.grpc.Err()
}

// ProcessConfigFor is the config of the process that runs container w of
// pod namespace/name with its servers on ip: the gRPC server on w.Port,
// the metrics server on w.MetricsPort and the web server on w.HTTPPort
// when those are not 0, with the timings, channelz and metrics family of
// w.Args. The lab's kubelet and the pinlab image's pod command both start
// their pods from it; Observer and Netns are left for the caller.
func ProcessConfigFor(w workload.Container, namespace, name string, ip netip.Addr) ProcessConfig {
	pc := ProcessConfig{GRPC: Config{
		Name:                  name,
		Namespace:             namespace,
		Addr:                  netip.AddrPortFrom(ip, uint16(w.Port)),
		MaxConnectionAge:      w.Args.MaxConnectionAge,
		MaxConnectionAgeGrace: w.Args.MaxConnectionAgeGrace,
		StartupDelay:          w.Args.StartupDelay,
		DrainDelay:            w.Args.DrainDelay,
		ServiceTime:           w.Args.ServiceTime,
		FailPercent:           w.Args.FailPercent,
		ORCA:                  w.Args.ORCA,
		NoChannelz:            w.Args.NoChannelz,
		Metrics:               w.Args.Metrics,
	}}
	if w.MetricsPort != 0 {
		pc.GRPC.MetricsAddr = netip.AddrPortFrom(ip, uint16(w.MetricsPort))
	}
	if w.HTTPPort != 0 {
		pc.Web = &WebConfig{Name: name, Namespace: namespace, Addr: netip.AddrPortFrom(ip, uint16(w.HTTPPort)), ServiceTime: w.Args.ServiceTime}
	}
	return pc
}
