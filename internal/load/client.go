// Package load drives the lab's traffic: each Client is a real grpc-go
// channel (grpc.NewClient) with a target and load-balancing policy, calling
// pricing.v1.Pricing/GetPrice open-loop at a fixed rate, so a slow pod never
// slows the offered load (no coordinated omission). Every call's result,
// including which pod answered, goes to an Observer.
package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Policies are the load-balancing policies a client may use, by their
// grpc-go names.
var Policies = []string{"pick_first", "round_robin"}

// Result is one finished call.
type Result struct {
	// Due is when the open-loop schedule wanted the call to start.
	Due time.Time
	// Latency runs from Due to completion, so time spent waiting to be
	// sent counts.
	Latency time.Duration
	Code    codes.Code
	// Pod and PodIP name the pod that answered; empty on error.
	Pod, PodIP string
}

// Observer receives a client's calls and connections. Methods are called
// concurrently from call goroutines and grpc-go transports.
type Observer interface {
	Called(Result)
	Conn(remote netip.AddrPort, open bool)
}

// Config configures a client.
type Config struct {
	// Name identifies the client (e.g. "order-0").
	Name string
	// Source is the IP the client dials from, like a client pod's IP;
	// required, inside 127.0.0.0/8.
	Source netip.Addr
	// Target is the gRPC target, e.g.
	// "dns://127.96.0.10:53/pricing.shop.svc.cluster.local:8471".
	Target string
	// Policy is "pick_first" (grpc-go's default) or "round_robin", set
	// through the default service config.
	Policy string
	// Rate is the offered load in calls per second; must be > 0.
	Rate float64
	// Timeout is each call's deadline; default 1s.
	Timeout time.Duration
	// MaxInFlight bounds outstanding calls; a call due while that many are
	// open is not sent and counts as RESOURCE_EXHAUSTED. Default 1000.
	MaxInFlight int
	// Observer receives results; nil discards them.
	Observer Observer
}

// Client is one load generator. Run it once.
type Client struct {
	cfg Config

	wg       sync.WaitGroup // call goroutines and channel drains
	inflight atomic.Int64

	mu     sync.Mutex // guards ch and closed
	ch     *channel   // the channel new calls use
	closed bool
}

// channel is one grpc.ClientConn and the calls in flight on it.
type channel struct {
	conn   *grpc.ClientConn
	client pricingv1.PricingClient
	calls  sync.WaitGroup
}

// New validates cfg and opens the client's first channel (connecting starts
// at once).
func New(cfg Config) (*Client, error) {
	if cfg.Policy == "" {
		cfg.Policy = "pick_first"
	}
	if cfg.Policy != "pick_first" && cfg.Policy != "round_robin" {
		return nil, fmt.Errorf("load: client %s: policy %q, want one of %v", cfg.Name, cfg.Policy, Policies)
	}
	if !(cfg.Rate > 0) {
		return nil, fmt.Errorf("load: client %s: rate %v calls/s, want > 0", cfg.Name, cfg.Rate)
	}
	if err := loopback.CheckIP(cfg.Source); err != nil {
		return nil, fmt.Errorf("load: client %s: source: %w", cfg.Name, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1000
	}
	if cfg.Observer == nil {
		cfg.Observer = discard{}
	}
	c := &Client{cfg: cfg}
	ch, err := c.dial()
	if err != nil {
		return nil, err
	}
	c.ch = ch
	return c, nil
}

func (c *Client) dial() (*channel, error) {
	d := loopback.Dialer{Source: c.cfg.Source}
	conn, err := grpc.NewClient(c.cfg.Target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, addr) }),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, c.cfg.Policy)),
		grpc.WithStatsHandler(&connObserver{obs: c.cfg.Observer}),
	)
	if err != nil {
		return nil, fmt.Errorf("load: client %s: %w", c.cfg.Name, err)
	}
	conn.Connect()
	return &channel{conn: conn, client: pricingv1.NewPricingClient(conn)}, nil
}

// Restart replaces the client's channel, as a restarted client process
// would: new calls use a fresh channel (new connections, a fresh
// resolution); the old channel closes once its in-flight calls finish.
func (c *Client) Restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("load: client stopped")
	}
	next, err := c.dial()
	if err != nil {
		return err
	}
	// Calls join a channel under c.mu, so every call on old has joined
	// before the drain below starts waiting.
	old := c.ch
	c.ch = next
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		old.calls.Wait()
		old.conn.Close()
	}()
	return nil
}

// Run sends calls on the open-loop schedule until ctx ends, then waits for
// calls in flight (each bounded by Timeout) and closes the channel.
func (c *Client) Run(ctx context.Context) error {
	defer c.shutdown()
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for k := int64(0); ; k++ {
		due := start.Add(time.Duration(float64(k) * float64(time.Second) / c.cfg.Rate))
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return nil
		}
		c.launch(due)
	}
}

func (c *Client) launch(due time.Time) {
	if c.inflight.Load() >= int64(c.cfg.MaxInFlight) {
		c.cfg.Observer.Called(Result{Due: due, Latency: time.Since(due), Code: codes.ResourceExhausted})
		return
	}
	c.mu.Lock()
	ch := c.ch
	ch.calls.Add(1)
	c.mu.Unlock()
	c.inflight.Add(1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.inflight.Add(-1)
		defer ch.calls.Done()
		c.call(ch, due)
	}()
}

func (c *Client) call(ch *channel, due time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), due.Add(c.cfg.Timeout))
	defer cancel()
	resp, err := ch.client.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "sku-1"})
	r := Result{Due: due, Latency: time.Since(due), Code: status.Code(err)}
	if err == nil {
		r.Pod, r.PodIP = resp.GetPod(), resp.GetPodIp()
	}
	c.cfg.Observer.Called(r)
}

// Close releases a client that will not Run (Run closes its client itself).
func (c *Client) Close() { c.shutdown() }

func (c *Client) shutdown() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
	c.ch.calls.Wait()
	c.ch.conn.Close()
}

type discard struct{}

func (discard) Called(Result)             {}
func (discard) Conn(netip.AddrPort, bool) {}
