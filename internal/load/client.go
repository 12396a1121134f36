package load

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/plan"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Result is one finished call.
type Result struct {
	// Due is when the open-loop schedule wanted the call to start.
	Due time.Time
	// Latency runs from Due to completion, so time spent waiting to be
	// sent counts.
	Latency time.Duration
	Code    codes.Code
	// Cause classifies a failed call (see CauseOf); empty on success.
	Cause plan.Cause
	// Pod and PodIP name the pod that answered; empty on error.
	Pod, PodIP string
	// Err is the call's error as grpc-go returned it (a status error), for
	// logs and examples; nil on success and for calls not sent.
	Err error
}

// Observer receives a client's calls and connections. Methods are called
// concurrently from call goroutines and grpc-go transports.
type Observer interface {
	Called(Result)
	Conn(ConnEvent)
}

// LagObserver is an optional Observer capability: it learns, as each call
// is launched, how late against its due time the open-loop schedule
// launched it (the schedule lag). Lag is the generator's own health: a
// machine too busy to keep the schedule shows here, apart from the
// system's latency. Sent is called from the pacing goroutine (or the
// Scheduler's) and must return quickly.
type LagObserver interface {
	Sent(due time.Time, lag time.Duration)
}

// lagHook returns obs's Sent, or nil if it has none.
func lagHook(obs Observer) func(time.Time, time.Duration) {
	if l, ok := obs.(LagObserver); ok {
		return l.Sent
	}
	return nil
}

// ConnEvent is one of the client's connections opening or closing.
type ConnEvent struct {
	// Remote is the server's address (a pod, or a Service VIP).
	Remote netip.AddrPort
	// Open is true when grpc-go took the connection up (stats.ConnBegin,
	// right after the TCP connect), false when it closed (stats.ConnEnd).
	Open bool
	// Reason says why it closed, as observed; "" for an open.
	Reason CloseReason
	// GoAwayAt is when the GOAWAY that ended the connection arrived, for a
	// close whose Reason is a GOAWAY (the connection then drained, and
	// closed later); zero otherwise.
	GoAwayAt time.Time
}

// Client is one gRPC load generator, a grpc-go channel calling open-loop.
// Its lifecycle is that of every client in this package: New does no I/O
// (it builds an idle channel; nothing resolves or connects), Run(ctx)
// connects and calls until ctx ends, and Close (or the end of Run) waits
// for everything the client started: calls in flight, channel drains and
// the channels' resolvers. Run it once; Close a client that never runs.
type Client struct {
	wg       sync.WaitGroup // call goroutines and channel drains
	inflight atomic.Int64
	changed  chan struct{} // a Reconfigure happened; one pending at most

	mu     sync.Mutex // guards ch and closed
	ch     *channel   // the channel new calls use
	closed bool

	// streams is cancelled when the client shuts down, so streams still
	// open when load stops end at once (and are not reported).
	streams    context.Context
	stopStream context.CancelFunc
}

// channel is one grpc.ClientConn, the settings it was built from, and the
// calls in flight on it.
type channel struct {
	cfg    Config
	conn   *grpc.ClientConn
	client pricingv1.PricingClient
	opts   []grpc.CallOption
	// md, when not nil, goes with every call: the client's name in
	// lbpolicy.ClientHeader, for a ring_hash that hashes it.
	md    metadata.MD
	calls sync.WaitGroup
}

// New validates cfg and builds the client's first channel, idle: it does
// no I/O (no lookup, no connection) and starts no calls; Run does.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ch, err := newChannel(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{ch: ch, changed: make(chan struct{}, 1)}
	c.streams, c.stopStream = context.WithCancel(context.Background())
	return c, nil
}

// Restart replaces the client's channel, as a restarted client process
// would: new calls use a fresh channel (new connections, a fresh
// resolution, an empty DNS cache), which starts connecting at once; the old
// channel closes once its in-flight calls finish. Restart and Reconfigure
// may be called concurrently with Run; of two concurrent ones the last to
// finish wins. After Run has returned they fail.
func (c *Client) Restart() error {
	c.mu.Lock()
	cfg := c.ch.cfg
	c.mu.Unlock()
	return c.replace(cfg)
}

// Reconfigure changes a running client's settings, as redeploying the client
// with new settings would: cfg is validated as by New, and new calls use a
// fresh channel built from it while the old channel drains, as with
// Restart. A new Rate takes effect from the next call: the open-loop
// schedule continues from the last call sent. On error the client keeps its
// current settings.
func (c *Client) Reconfigure(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := c.replace(cfg); err != nil {
		return err
	}
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return nil
}

// replace builds cfg's channel, swaps it in and starts it connecting.
func (c *Client) replace(cfg Config) error {
	next, err := newChannel(cfg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		next.conn.Close()
		return errors.New("load: client stopped")
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
	c.mu.Unlock()
	next.conn.Connect()
	return nil
}

func (c *Client) current() *channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}

// Connect starts the channel resolving and connecting without sending a
// call, as a client process does when it starts, and returns at once. Run
// connects too; Connect lets connections be up before load starts.
func (c *Client) Connect() { c.current().conn.Connect() }

// Run starts the channel connecting, sends calls on the open-loop schedule
// until ctx ends, then waits for calls in flight (each bounded by Timeout)
// and closes the channel, as Close does. It returns nil.
func (c *Client) Run(ctx context.Context) error {
	defer c.shutdown()
	c.current().conn.Connect()
	cfg := c.current().cfg
	rate := func() float64 { return c.current().cfg.Rate }
	pacing{rate: rate, changed: c.changed, phase: cfg.Phase, launch: c.launch, sent: lagHook(cfg.Observer)}.run(ctx, cfg.Scheduler)
	return nil
}

func (c *Client) launch(due time.Time) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	ch := c.ch
	if c.inflight.Load() >= int64(ch.cfg.MaxInFlight) {
		c.mu.Unlock()
		ch.cfg.Observer.Called(Result{Due: due, Latency: time.Since(due), Code: codes.ResourceExhausted, Cause: plan.CauseNotSent})
		return
	}
	// Joined under c.mu, so shutdown, once it has set closed, waits for
	// every call.
	ch.calls.Add(1)
	c.wg.Add(1)
	c.mu.Unlock()
	c.inflight.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.inflight.Add(-1)
		defer ch.calls.Done()
		if ch.cfg.Stream {
			ch.stream(c.streams, due)
			return
		}
		ch.call(due)
	}()
}

func (ch *channel) call(due time.Time) {
	ctx, cancel := context.WithDeadline(ch.outgoing(context.Background()), due.Add(ch.cfg.Timeout))
	defer cancel()
	resp, err := ch.client.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "sku-1"}, ch.opts...)
	r := Result{Due: due, Latency: time.Since(due), Code: status.Code(err), Cause: CauseOf(err), Err: err}
	if err == nil {
		r.Pod, r.PodIP = resp.GetPod(), resp.GetPodIp()
	}
	ch.cfg.Observer.Called(r)
}

// outgoing is ctx with the channel's metadata, if it has any.
func (ch *channel) outgoing(ctx context.Context) context.Context {
	if ch.md == nil {
		return ctx
	}
	return metadata.NewOutgoingContext(ctx, ch.md)
}

// streamInterval is the time between a stream's replies.
const streamInterval = 100 * time.Millisecond

// stream runs one WatchPrices stream due at due. A stream cut short by
// stop (the client shutting down) is not reported.
func (ch *channel) stream(stop context.Context, due time.Time) {
	length := ch.cfg.StreamLength
	ctx, cancel := context.WithDeadline(ch.outgoing(stop), due.Add(length+ch.cfg.Timeout))
	defer cancel()
	// The server sends its first reply at once and then one per interval.
	want := int64(length/streamInterval) + 1
	r := Result{Due: due}
	st, err := ch.client.WatchPrices(ctx, &pricingv1.WatchPricesRequest{Sku: "sku-1", IntervalMs: int64(streamInterval / time.Millisecond), Count: want}, ch.opts...)
	var got int64
	for err == nil {
		var resp *pricingv1.GetPriceResponse
		resp, err = st.Recv()
		if err != nil {
			break
		}
		got++
		if r.Pod == "" {
			r.Pod, r.PodIP = resp.GetPod(), resp.GetPodIp()
		}
	}
	if stop.Err() != nil {
		return
	}
	if errors.Is(err, io.EOF) {
		err = nil
		if got < want {
			err = status.Errorf(codes.DataLoss, "stream ended after %d of %d replies", got, want)
		}
	}
	r.Latency, r.Code, r.Cause, r.Err = time.Since(due), status.Code(err), CauseOf(err), err
	if err != nil {
		r.Pod, r.PodIP = "", ""
	}
	ch.cfg.Observer.Called(r)
}

// Close stops the client: no new calls start, streams still open end (and
// are not reported), and Close returns once the calls in flight (each
// bounded by Timeout), channel drains and channels are done. Run closes its
// client itself; Close releases one that never runs. Safe to call more
// than once and concurrently with Run.
func (c *Client) Close() { c.shutdown() }

func (c *Client) shutdown() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.stopStream()
	c.wg.Wait()
	c.ch.calls.Wait()
	c.ch.conn.Close()
}

type discard struct{}

func (discard) Called(Result)  {}
func (discard) Conn(ConnEvent) {}
