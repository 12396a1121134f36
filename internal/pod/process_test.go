package pod

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/loopback"
)

// TestProcessWebCannotListen: a web server that cannot bind fails the
// start, or, after a start-up delay, ends the process with the error.
func TestProcessWebCannotListen(t *testing.T) {
	ip := netip.MustParseAddr("127.205.251.1")
	taken, err := loopback.Listen(context.Background(), netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := loopback.AddrPort(taken.Addr())
	tests := []struct {
		name  string
		delay time.Duration
	}{
		{name: "no delay"},
		{name: "after the start-up delay", delay: 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewProcess(ProcessConfig{
				GRPC: Config{Name: "p", Addr: netip.AddrPortFrom(ip, 0), StartupDelay: tt.delay},
				Web:  &WebConfig{Name: "p", Addr: busy},
			})
			err := p.Start(context.Background())
			if tt.delay == 0 {
				if err == nil {
					p.Kill()
					t.Fatal("Start with a taken HTTP port succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				p.Kill()
				t.Fatal("the process did not end after its web server failed to listen")
			}
			if err := p.Err(); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("Err = %v, want address in use", err)
			}
		})
	}
}
