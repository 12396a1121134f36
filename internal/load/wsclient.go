package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
)

// Reconnect back-off of WSClient after a failed connect.
const (
	DefaultWSBackoff = 50 * time.Millisecond
	MaxWSBackoff     = time.Second
	// WSStatusNoCloseFrame is the close status WSConfig.OnClose gets when
	// the connection ended without a close frame: 1006, RFC 6455 7.1.5.
	WSStatusNoCloseFrame = int(websocket.StatusAbnormalClosure)
)

// WSConfig configures a WSClient. Name, Source, URL and Rate are required;
// every other zero value works.
type WSConfig struct {
	// Name, Source, URL and DNS are as in HTTPConfig; the client connects
	// to URL + "/v1/watch".
	Name   string
	Source netip.Addr
	URL    string
	DNS    string
	// Rate is the offered load in messages per second, open-loop; must be
	// > 0 and at most MaxWebRate.
	Rate float64
	// Timeout is each message's deadline for its reply, counted from when
	// it was due, and bounds each connect and handshake; default 1s.
	Timeout time.Duration
	// MaxInFlight bounds messages awaiting a reply (queued or sent); a
	// message due while that many are waiting is not sent and counts as
	// RESOURCE_EXHAUSTED. Default 1000.
	MaxInFlight int
	// Scheduler, if not nil, paces the client's calls (shared by the
	// clients of a run: more precise than a timer per client, see
	// Scheduler); its Run must be running. Nil paces with a timer.
	Scheduler *Scheduler
	// Phase delays the client's first call (and so its whole schedule) from
	// the start of Run, so that clients started together are not in step:
	// give each a different one within 1/Rate. Default 0.
	Phase time.Duration
	// Backoff is the wait after a failed connect before the next; it
	// doubles per failure up to MaxWSBackoff, with ±20% jitter. Default
	// DefaultWSBackoff. A lost connection that had lived at least
	// MaxWSBackoff is redialled at once; one that lived less counts as a
	// failure.
	Backoff time.Duration
	// OnClose, if not nil, is told when a connection is lost (not when the
	// client closes it itself): remote is the address dialled and status
	// the close code the server sent, e.g. 1001 (going away), or
	// WSStatusNoCloseFrame. Called from the client's goroutine; keep it quick.
	OnClose func(remote netip.AddrPort, status int)
	// Observer receives every message's result and every TCP connection,
	// as for HTTPClient. Nil discards.
	Observer Observer
}

// WSClient holds one WebSocket connection and sends a message on it at the
// open-loop rate, recording each reply as a Result (Pod from the reply).
// Its lifecycle is that of every client in this package: NewWSClient does
// no I/O and starts nothing; Run(ctx) connects, sends until ctx ends, then
// closes the client; Close waits for everything the client started (the
// connection manager, the writer, readers and retiring connections).
//
// When the connection is lost the client reconnects, resolving the host
// again: at once, or after a back-off when connecting failed or the lost
// connection was young (see Backoff). Messages due while connecting wait
// for the connection (up to their deadline); messages due while backing
// off fail at once as UNAVAILABLE, as a gRPC channel in TRANSIENT_FAILURE
// fails fail-fast calls; messages sent on a connection that is then lost
// fail as UNAVAILABLE. Run it once; Close it if it never runs.
type WSClient struct {
	cfg    WSConfig
	target target
	http   *http.Client
	tr     *http.Transport

	ctx         context.Context // ends once the client has closed its connections
	cancel      context.CancelFunc
	dialCtx     context.Context // ends when Close begins
	stopDialing context.CancelFunc
	quit        chan struct{} // closed by Close
	restart     chan struct{} // Restart's request, capacity 1
	sendq       chan wsMsg    // messages for the writer, capacity MaxInFlight
	wg          sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	cur     *wsConn    // the connection messages go on; nil while connecting
	up      chan struct{}
	failing bool // the last connect failed
	pending map[int64]*wsPending
	order   []int64 // pending ids in due order, with stale ones
	nextID  int64
	started bool // Run started the manager and writer
	closed  bool
}

type wsMsg struct {
	id  int64
	due time.Time
}

type wsPending struct {
	due  time.Time
	conn *wsConn // nil until written
}

// wsConn is one WebSocket connection and its reader's outcome.
type wsConn struct {
	ws       *websocket.Conn
	remote   netip.AddrPort
	done     chan struct{} // closed when the reader returns
	status   int           // close status received; set before done closes
	inflight int           // messages written, not answered; under WSClient.mu
}

// NewWSClient validates cfg and returns the client; nothing is resolved or
// dialled, and no goroutine starts, until Run.
func NewWSClient(cfg WSConfig) (*WSClient, error) {
	fail := func(err error) (*WSClient, error) {
		return nil, fmt.Errorf("load: websocket client %s: %w", cfg.Name, err)
	}
	if err := checkRate(cfg.Rate); err != nil {
		return fail(err)
	}
	cfg.Backoff = orDefault(cfg.Backoff, DefaultWSBackoff)
	t, d, err := webDefaults(cfg.URL, cfg.DNS, cfg.Source, &cfg.Timeout, &cfg.MaxInFlight, &cfg.Observer)
	if err != nil {
		return fail(err)
	}
	c := &WSClient{
		// No keep-alive: every connect opens a fresh TCP connection (a
		// failed handshake's is not reused), so it resolves and goes
		// through the VIP again. net/http still sends the upgrade
		// without "Connection: close".
		cfg: cfg, target: t, tr: newTransport(d, 0, 0, true),
		quit: make(chan struct{}), restart: make(chan struct{}, 1), sendq: make(chan wsMsg, cfg.MaxInFlight),
		up: make(chan struct{}), pending: map[int64]*wsPending{}, nextID: 1,
	}
	c.http = &http.Client{Transport: c.tr}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.dialCtx, c.stopDialing = context.WithCancel(c.ctx)
	return c, nil
}

// start starts the connection manager and the writer, unless the client
// is closed or already started; false if it did not.
func (c *WSClient) start() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.started {
		return false
	}
	c.started = true
	c.wg.Add(2)
	go c.manage()
	go c.write()
	return true
}

// Restart replaces the connection, as a restarted client would: the client
// connects afresh (resolving again), new messages wait for the new
// connection, and the old one closes with 1000 (normal closure) once its
// messages are answered (at most Timeout). It does not block.
func (c *WSClient) Restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("load: websocket client stopped")
	}
	select {
	case c.restart <- struct{}{}:
	default:
	}
	return nil
}

// Run connects, sends messages on the open-loop schedule until ctx ends,
// waits for the replies still due (at most Timeout), then closes the client
// as Close does. Messages due while the client is closed fail as CANCELLED.
// It returns nil.
func (c *WSClient) Run(ctx context.Context) error {
	defer c.Close()
	c.start()
	pacing{rate: fixedRate(c.cfg.Rate), phase: c.cfg.Phase, launch: c.launch, sent: lagHook(c.cfg.Observer)}.run(ctx, c.cfg.Scheduler)
	deadline := time.Now().Add(c.cfg.Timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.waiting(time.Now()) > 0 && time.Now().Before(deadline) {
		<-tick.C
	}
	return nil
}

// waiting expires overdue messages and returns how many still wait.
func (c *WSClient) waiting(now time.Time) int {
	c.mu.Lock()
	expired := c.expire(now)
	n := len(c.pending)
	c.mu.Unlock()
	c.report(expired)
	return n
}

func (c *WSClient) launch(due time.Time) {
	now := time.Now()
	c.mu.Lock()
	results := c.expire(now)
	code := codes.OK
	switch {
	case c.closed:
		code = codes.Canceled
	case c.failing:
		code = codes.Unavailable
	case len(c.pending) >= c.cfg.MaxInFlight:
		code = codes.ResourceExhausted
	default:
		id := c.nextID
		c.nextID++
		select {
		case c.sendq <- wsMsg{id: id, due: due}:
			c.pending[id] = &wsPending{due: due}
			c.order = append(c.order, id)
		default:
			code = codes.ResourceExhausted
		}
	}
	c.mu.Unlock()
	if code != codes.OK {
		r := Result{Due: due, Latency: now.Sub(due), Code: code}
		if code == codes.ResourceExhausted {
			r.Cause = plan.CauseNotSent
		}
		results = append(results, r)
	}
	c.report(results)
}

// expire removes messages past their deadline and returns their results.
// Called with c.mu held.
func (c *WSClient) expire(now time.Time) []Result {
	var out []Result
	for len(c.order) > 0 {
		id := c.order[0]
		p, ok := c.pending[id]
		if ok && now.Before(p.due.Add(c.cfg.Timeout)) {
			break
		}
		c.order = c.order[1:]
		if ok {
			out = append(out, c.take(id, p, codes.DeadlineExceeded, now))
		}
	}
	return out
}

// take removes pending message id and returns its result. Called with
// c.mu held.
func (c *WSClient) take(id int64, p *wsPending, code codes.Code, now time.Time) Result {
	delete(c.pending, id)
	if p.conn != nil {
		p.conn.inflight--
	}
	return Result{Due: p.due, Latency: now.Sub(p.due), Code: code}
}

// finish records the outcome of message id if it is still pending.
func (c *WSClient) finish(id int64, code codes.Code, q webapi.Quote) {
	now := time.Now()
	c.mu.Lock()
	p, ok := c.pending[id]
	var r Result
	if ok {
		r = c.take(id, p, code, now)
	}
	c.mu.Unlock()
	if ok {
		r.Pod, r.PodIP = q.Pod, q.PodIP
		c.cfg.Observer.Called(r)
	}
}

func (c *WSClient) report(rs []Result) {
	for _, r := range rs {
		c.cfg.Observer.Called(r)
	}
}

// write sends queued messages, in order, on the current connection.
func (c *WSClient) write() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var m wsMsg
		select {
		case m = <-c.sendq:
		case <-c.quit:
			return
		}
		conn := c.assign(m, timer)
		if conn == nil {
			continue
		}
		b, _ := json.Marshal(webapi.WatchRequest{ID: m.id, SKU: "sku-1"})
		ctx, cancel := context.WithDeadline(c.ctx, m.due.Add(c.cfg.Timeout))
		err := conn.ws.Write(ctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			c.finish(m.id, errCode(err), webapi.Quote{})
			conn.ws.CloseNow()
		}
	}
}

// assign waits for a connection for m and marks m as written on it; nil
// when m expired or was failed meanwhile, or the client closes.
func (c *WSClient) assign(m wsMsg, timer *time.Timer) *wsConn {
	for {
		c.mu.Lock()
		p, ok := c.pending[m.id]
		conn, up := c.cur, c.up
		if ok && conn != nil {
			p.conn = conn
			conn.inflight++
		}
		c.mu.Unlock()
		switch {
		case !ok:
			return nil
		case conn != nil:
			return conn
		}
		timer.Reset(time.Until(m.due.Add(c.cfg.Timeout)))
		select {
		case <-up:
		case <-timer.C:
			c.finish(m.id, codes.DeadlineExceeded, webapi.Quote{})
			return nil
		case <-c.quit:
			return nil
		}
	}
}

// manage keeps one connection up until Close.
func (c *WSClient) manage() {
	defer c.wg.Done()
	backoff := c.cfg.Backoff
	for {
		conn, err := c.connect()
		if err != nil {
			c.setFailing()
			if !c.sleep(jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, MaxWSBackoff)
			continue
		}
		up := time.Now()
		c.publish(conn)
		c.wg.Add(1)
		go c.read(conn)
		select {
		case <-conn.done:
			c.unpublish(conn, codes.Unavailable)
			if c.cfg.OnClose != nil {
				c.cfg.OnClose(conn.remote, conn.status)
			}
			// A connection that lived less than MaxWSBackoff counts as a
			// failure, so a server that accepts and drops at once is not
			// redialled in a tight loop.
			if time.Since(up) >= MaxWSBackoff {
				backoff = c.cfg.Backoff
			} else {
				if !c.sleep(jitter(backoff)) {
					return
				}
				backoff = min(2*backoff, MaxWSBackoff)
			}
		case <-c.restart:
			c.unpublish(conn, codes.OK)
			c.wg.Add(1)
			go c.retire(conn)
		case <-c.quit:
			c.unpublish(conn, codes.OK)
			conn.ws.Close(websocket.StatusNormalClosure, "client closing")
			<-conn.done
			c.failOn(conn)
			return
		}
	}
}

// connect dials the WebSocket, bounded by Timeout.
func (c *WSClient) connect() (*wsConn, error) {
	ctx, cancel := context.WithTimeout(c.dialCtx, c.cfg.Timeout)
	defer cancel()
	var remote netip.AddrPort
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		remote = loopback.AddrPort(info.Conn.RemoteAddr())
	}})
	ws, _, err := websocket.Dial(ctx, c.target.base+"/v1/watch", &websocket.DialOptions{HTTPClient: c.http})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(maxBody)
	return &wsConn{ws: ws, remote: remote, done: make(chan struct{}), status: WSStatusNoCloseFrame}, nil
}

// sleep waits d; false if the client closes first.
func (c *WSClient) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.quit:
		return false
	}
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func (c *WSClient) setFailing() {
	c.mu.Lock()
	c.failing = true
	c.mu.Unlock()
}

// publish makes conn the connection messages go on. A Restart asked for
// before now is satisfied by conn.
func (c *WSClient) publish(conn *wsConn) {
	c.mu.Lock()
	c.cur, c.failing = conn, false
	close(c.up)
	c.mu.Unlock()
	select {
	case <-c.restart:
	default:
	}
}

// unpublish stops new messages going on conn; with a code other than OK it
// also fails the messages written on conn.
func (c *WSClient) unpublish(conn *wsConn, code codes.Code) {
	c.mu.Lock()
	c.cur, c.up = nil, make(chan struct{})
	c.mu.Unlock()
	if code != codes.OK {
		c.failOn(conn)
	}
}

// failOn fails every message still waiting for a reply on conn.
func (c *WSClient) failOn(conn *wsConn) {
	now := time.Now()
	var rs []Result
	c.mu.Lock()
	for id, p := range c.pending {
		if p.conn == conn {
			rs = append(rs, c.take(id, p, codes.Unavailable, now))
		}
	}
	c.mu.Unlock()
	c.report(rs)
}

// retire closes a replaced connection once its messages are answered or
// Timeout passed.
func (c *WSClient) retire(conn *wsConn) {
	defer c.wg.Done()
	deadline := time.NewTimer(c.cfg.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
wait:
	for c.inflightOn(conn) > 0 {
		select {
		case <-tick.C:
		case <-deadline.C:
			break wait
		case <-conn.done:
			break wait
		case <-c.quit:
			break wait
		}
	}
	conn.ws.Close(websocket.StatusNormalClosure, "client restarting")
	<-conn.done
	c.failOn(conn)
}

func (c *WSClient) inflightOn(conn *wsConn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return conn.inflight
}

// read records replies on conn until it ends.
func (c *WSClient) read(conn *wsConn) {
	defer c.wg.Done()
	defer close(conn.done)
	for {
		_, data, err := conn.ws.Read(c.ctx)
		if err != nil {
			if s := websocket.CloseStatus(err); s != -1 {
				conn.status = int(s)
			}
			conn.ws.CloseNow()
			return
		}
		var reply struct {
			webapi.Quote
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &reply) != nil {
			continue
		}
		code := codes.OK
		if reply.Error != "" {
			code, reply.Pod, reply.PodIP = codes.InvalidArgument, "", ""
		}
		c.finish(reply.ID, code, reply.Quote)
	}
}

// Close stops the client: no new messages, the connection closes with 1000
// (normal closure), and every goroutine of the client has returned when
// Close does (bounded by the WebSocket close handshake's own limits, 5 s to
// write and 5 s to wait). Messages still waiting fail as UNAVAILABLE. Safe
// to call more than once and concurrently with Run.
func (c *WSClient) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.quit)
	c.stopDialing()
	c.wg.Wait()
	c.cancel()
	c.tr.CloseIdleConnections()
	var rs []Result
	now := time.Now()
	c.mu.Lock()
	for id, p := range c.pending {
		rs = append(rs, c.take(id, p, codes.Unavailable, now))
	}
	c.mu.Unlock()
	c.report(rs)
}
