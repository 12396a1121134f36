package labup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/netns"
)

// controlAPI is lab up's control API, the file its token is kept in, and
// the dashboard it serves (nil without UI).
type controlAPI struct {
	srv *control.Server
	// inside is the same API on the same address inside lab up's network
	// namespace (on a real control plane), for the pinlab commands lab
	// exec runs there; nil on the host.
	inside    *control.Server
	tokenFile string
	token     string
	board     *labBoard
	stopBoard context.CancelFunc
	boardRun  sync.WaitGroup
}

// serveControl claims the control address (or serves ln, bound on it
// already by the host side), then writes the token file: only the holder
// of the address writes it. With a board, the API serves its dashboard
// too.
func serveControl(ctx context.Context, opts Options, board *labBoard, ln net.Listener) (*controlAPI, error) {
	token := control.NewToken()
	cfg := control.Config{Addr: opts.Control, Token: token, Listener: ln}
	if netns.Inside() {
		cfg.NetnsPID = os.Getpid()
	}
	if board != nil {
		cfg.UI = board.board.Handler()
	}
	srv, err := control.Listen(ctx, cfg)
	if err != nil {
		return nil, listenError(err)
	}
	api := &controlAPI{srv: srv, tokenFile: opts.TokenFile, token: token, board: board}
	if ln != nil {
		icfg := cfg
		icfg.Listener, icfg.Addr, icfg.UI = nil, srv.Addr(), nil
		if api.inside, err = control.Listen(ctx, icfg); err != nil {
			srv.Shutdown(context.Background())
			return nil, fmt.Errorf("lab up: the control API inside the lab's network namespace: %w", err)
		}
	}
	if board != nil {
		bctx, cancel := context.WithCancel(context.Background())
		api.stopBoard = cancel
		api.boardRun.Go(func() { board.board.Run(bctx) })
	}
	mkdir := api.tokenFile == "" // the default place is ours to create; a path given is not
	if mkdir {
		api.tokenFile, err = control.TokenPath(srv.Addr())
	}
	if err == nil {
		err = control.WriteToken(api.tokenFile, token, mkdir)
	}
	if err != nil {
		api.tokenFile = "" // not written: nothing of ours to remove
		api.stop()
		return nil, fmt.Errorf("lab up: %w (pass --token-file)", err)
	}
	return api, nil
}

// serve makes the API answer for l.
func (a *controlAPI) serve(l *lab.Lab) {
	a.srv.Serve(l)
	if a.inside != nil {
		a.inside.Serve(l)
	}
}

// port is the API's port, which names lab up's other files.
func (a *controlAPI) port() string {
	_, port, _ := net.SplitHostPort(a.srv.Addr())
	return port
}

// stopTimeout bounds how long stopping the control API waits for the
// requests in progress.
const stopTimeout = 5 * time.Second

// stop ends the dashboard's streams, shuts the API down and removes the
// token file, now useless.
func (a *controlAPI) stop() {
	if a.stopBoard != nil {
		a.board.board.Finish([]string{"The lab has stopped."})
		a.stopBoard()
		a.boardRun.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if a.inside != nil {
		a.inside.Shutdown(ctx)
	}
	a.srv.Shutdown(ctx)
	if a.tokenFile != "" {
		os.Remove(a.tokenFile)
	}
}

// listenError explains a control API bind failure; only an address in use
// can be another lab's.
func listenError(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w (another lab up may hold it; pass --control 127.0.0.1:<port>)", err)
	}
	return err
}

// filesDir is where lab up keeps the files other commands read (the
// kubeconfig on a real control plane): beside the control API's token
// file.
func filesDir(opts Options, ctl string) (string, error) {
	if opts.TokenFile != "" {
		return filepath.Dir(opts.TokenFile), nil
	}
	p, err := control.TokenPath(ctl)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(p)
	return dir, os.MkdirAll(dir, 0o700)
}
