package load

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/pod"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type collector struct {
	mu     sync.Mutex
	codes  map[codes.Code]int
	pods   map[string]int
	opened int
	late   int
}

func (c *collector) Called(r Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.codes == nil {
		c.codes, c.pods = map[codes.Code]int{}, map[string]int{}
	}
	c.codes[r.Code]++
	c.pods[r.Pod]++
	if r.Latency < 0 {
		c.late++
	}
}

func (c *collector) Conn(_ netip.AddrPort, open bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if open {
		c.opened++
	}
}

func startPod(t *testing.T, ip string) string {
	t.Helper()
	s := pod.New(pod.Config{Name: "pod-" + ip, Addr: netip.MustParseAddrPort(ip + ":0")})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s.Addr().String()
}

func TestConfigErrors(t *testing.T) {
	good := Config{Name: "c", Source: netip.MustParseAddr("127.203.1.1"), Target: "passthrough:///127.0.0.1:1", Rate: 1}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{name: "zero rate", mod: func(c *Config) { c.Rate = 0 }},
		{name: "negative rate", mod: func(c *Config) { c.Rate = -1 }},
		{name: "unknown policy", mod: func(c *Config) { c.Policy = "random" }},
		{name: "source outside loopback", mod: func(c *Config) { c.Source = netip.MustParseAddr("10.0.0.1") }},
		{name: "no source", mod: func(c *Config) { c.Source = netip.Addr{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mod(&cfg)
			if _, err := New(cfg); err == nil {
				t.Fatal("New succeeded, want an error")
			}
		})
	}
}

// TestOpenLoopSchedule: the client offers exactly the scheduled number of
// calls whatever the server does; every one is accounted for.
func TestOpenLoopSchedule(t *testing.T) {
	addr := startPod(t, "127.203.201.1")
	var obs collector
	c, err := New(Config{Name: "c", Source: netip.MustParseAddr("127.203.201.9"), Target: "passthrough:///" + addr, Rate: 500, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	c.Run(ctx)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	total := 0
	for _, n := range obs.codes {
		total += n
	}
	// 500/s for 0.4s schedules calls due at 0, 2ms, ... 400ms: 201 at most.
	if total > 201 || total < 100 || obs.codes[codes.OK] != total {
		t.Errorf("codes %v (%d calls); want up to 201 calls, all OK", obs.codes, total)
	}
	if obs.pods["pod-127.203.201.1"] != total {
		t.Errorf("replies by pod %v; want all from pod-127.203.201.1", obs.pods)
	}
}

func TestRestartOpensANewConnection(t *testing.T) {
	addr := startPod(t, "127.203.201.2")
	var obs collector
	c, err := New(Config{Name: "c", Source: netip.MustParseAddr("127.203.201.10"), Target: "passthrough:///" + addr, Rate: 200, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	opened := func(n int) func() bool {
		return func() bool { obs.mu.Lock(); defer obs.mu.Unlock(); return obs.opened >= n }
	}
	waitFor("first connection", opened(1))
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor("second connection", opened(2))
	cancel()
	<-done
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.codes) != 1 || obs.codes[codes.OK] == 0 {
		t.Errorf("codes %v across a restart; want only OK", obs.codes)
	}
	if err := c.Restart(); err == nil {
		t.Error("Restart after Run returned succeeded, want an error")
	}
}

func TestUnreachableTargetCountsErrors(t *testing.T) {
	var obs collector
	// Nothing listens on port 1 of 127.203.201.3.
	c, err := New(Config{Name: "c", Source: netip.MustParseAddr("127.203.201.11"), Target: "passthrough:///127.203.201.3:1", Rate: 100, Timeout: 50 * time.Millisecond, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c.Run(ctx)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.codes[codes.OK] != 0 || obs.codes[codes.Unavailable]+obs.codes[codes.DeadlineExceeded] == 0 {
		t.Errorf("codes %v; want only UNAVAILABLE or DEADLINE_EXCEEDED", obs.codes)
	}
}
