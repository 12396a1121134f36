package runner

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// ClientHost is a Cluster that runs a variant's load clients itself, as
// pods (a remote cluster: one Deployment per client group), instead of
// the runner running them in its own process. The runner checks for it
// once per variant, after WaitReady.
type ClientHost interface {
	// StartClients starts one load client for each of cs (by Name, as
	// plan.Client names them) and returns once each runs and reports:
	// what client cs[i] observes goes to obs[i]. Errors name the client
	// group and what the cluster said (a pod that cannot start, an image
	// it cannot pull). It returns ctx's error once ctx ends.
	StartClients(ctx context.Context, cs []plan.Client, obs []HostedObserver) (HostedClients, error)
}

// HostedClients are a ClientHost's running clients. Restart and
// Configure (plan.Clients) act on them as timeline steps do.
type HostedClients interface {
	plan.Clients
	// Relay reports the clients' events to their observers until ctx
	// ends, then reads what was left once more, and returns. Calls and
	// launches due before start (the clients ran while the variant was
	// set up) are dropped; connection events are all reported, as a
	// local client's connect before the load is.
	Relay(ctx context.Context, start time.Time)
	// Close releases what the runner's side of the clients holds (their
	// connections); the clients' pods go with the cluster's Close.
	Close() error
}

// HostedObserver receives one hosted client's events, with the times
// they happened on the runner's clock. Its methods are called from one
// goroutine at a time for one client (StartClients', then Relay's).
type HostedObserver interface {
	// Started says the client runs at ip (its pod's address), before its
	// first events and again whenever that address changes (its pod was
	// replaced).
	Started(ip netip.Addr)
	Called(load.Result)
	Sent(due time.Time, lag time.Duration)
	Conn(ev load.ConnEvent, at time.Time)
}

// hostedObserver records a hosted client's events as clientObserver does
// a local one's, at the times the client saw them. The pods' side is not
// observed: each call the client saw answered counts as served by the
// pod that answered, for the client's address, when it ended.
type hostedObserver struct {
	clientObserver
	info stats.ClientInfo
	ip   netip.Addr
}

func (o *hostedObserver) Started(ip netip.Addr) {
	o.ip, o.info.IP = ip, ip
	o.rec.Client(o.info)
}

func (o *hostedObserver) Called(r load.Result) {
	o.clientObserver.Called(r)
	if r.Code == codes.OK && r.Pod != "" {
		o.rec.Served(r.Pod, o.ip, r.Due.Add(r.Latency))
	}
}

func (o *hostedObserver) Conn(ev load.ConnEvent, at time.Time) {
	if !ev.GoAwayAt.IsZero() {
		o.rec.ClientGoAway(o.name, ev.Remote, ev.GoAwayAt)
	}
	o.rec.ClientConn(o.name, ev.Remote, ev.Open, string(ev.Reason), at)
	o.tap.conn(o.name, ev.Open)
}

// loadClients are a variant's running load clients as drive uses them:
// the runner's own (clients) or a ClientHost's (hosted).
type loadClients interface {
	plan.Clients
	// run runs the load from start until ctx ends.
	run(ctx context.Context, start time.Time)
	close()
}

// hosted adapts a ClientHost's clients to drive, recording their
// restarts as clients.Restart and Configure do.
type hosted struct {
	HostedClients
	rec *stats.Recorder
}

func (h hosted) Restart(names []string) error {
	err := h.HostedClients.Restart(names)
	if err == nil {
		h.restarted(names)
	}
	return err
}

func (h hosted) Configure(next []plan.Client) error {
	err := h.HostedClients.Configure(next)
	if err == nil {
		names := make([]string, len(next))
		for i, cp := range next {
			names[i] = cp.Name
		}
		h.restarted(names)
	}
	return err
}

func (h hosted) restarted(names []string) {
	now := time.Now()
	for _, n := range names {
		h.rec.ClientRestart(n, now)
	}
}

func (h hosted) run(ctx context.Context, start time.Time) { h.Relay(ctx, start) }
func (h hosted) close()                                   { _ = h.Close() }

// startHosted starts v's clients on host, recording into rec.
func startHosted(ctx context.Context, host ClientHost, rec *stats.Recorder, t tap, v plan.Variant) (loadClients, error) {
	obs := make([]HostedObserver, len(v.Clients))
	for i, cp := range v.Clients {
		info := stats.ClientInfo{Name: cp.Name, Group: cp.Group, Service: cp.Target.Key()}
		rec.Client(info)
		obs[i] = &hostedObserver{clientObserver: clientObserver{rec: rec, name: cp.Name, tap: t}, info: info}
	}
	h, err := host.StartClients(ctx, v.Clients, obs)
	if err != nil {
		return nil, err
	}
	return hosted{h, rec}, nil
}

// run runs the local clients and their scheduler until ctx ends.
func (cl *clients) run(ctx context.Context, _ time.Time) {
	var wg sync.WaitGroup
	wg.Go(func() { cl.sched.Run(ctx) })
	for _, c := range cl.byIndex {
		wg.Go(func() { c.Run(ctx) })
	}
	wg.Wait()
}
