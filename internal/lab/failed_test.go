package lab

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// exitingComponent is a Component whose exit the test decides.
type exitingComponent struct {
	done chan struct{}
	err  error
}

func (c *exitingComponent) Done() <-chan struct{} { return c.done }
func (c *exitingComponent) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// TestWatchExit: a watched process that exits while the lab runs fails
// the lab (Failed closes, Err names it); one that exits while the lab
// closes, or after it stopped, does not.
func TestWatchExit(t *testing.T) {
	tests := []struct {
		name     string
		closing  bool // the lab is closing when the process exits
		stopped  bool // the lab's run context ended first
		wantFail string
	}{
		{name: "exits while the lab runs", wantFail: "lab: kube-proxy stopped while the lab ran: killed"},
		{name: "exits while the lab closes", closing: true},
		{name: "lab stopped first", stopped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &Lab{errs: make(chan error, 8)}
			l.runCtx, l.cancel = context.WithCancel(context.Background())
			l.failed, l.failure = context.WithCancelCause(context.Background())
			c := &exitingComponent{done: make(chan struct{}), err: errors.New("killed")}
			l.watchExit("kube-proxy", c)
			if tt.closing {
				l.closing.Store(true)
			}
			if tt.stopped {
				l.cancel()
			}
			close(c.done)
			if tt.wantFail == "" {
				l.cancel()
				l.wg.Wait()
				if err := l.Err(); err != nil {
					t.Errorf("Err() = %v, want nil", err)
				}
				return
			}
			select {
			case <-l.Failed():
			case <-time.After(10 * time.Second):
				t.Fatal("Failed() not closed 10 s after the process exited")
			}
			if err := l.Err(); err == nil || !strings.Contains(err.Error(), tt.wantFail) {
				t.Errorf("Err() = %v, want %q", err, tt.wantFail)
			}
			l.cancel()
			l.wg.Wait()
		})
	}
}
