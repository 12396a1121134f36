package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/runner"
	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// StartClients runs each client group of cs as a StatefulSet named after
// the group, in the variant's namespace: its pods are named as the
// plan names the group's clients ("GROUP-0" ... "GROUP-N-1"), so that
// each pod is one client, also after a restart. Each pod runs the image's
// load client with the group's settings (loadArgs) and serves its
// events; StartClients returns once every pod is ready and its events
// answer through port-forward.
func (c *Cluster) StartClients(ctx context.Context, cs []plan.Client, obs []runner.HostedObserver) (runner.HostedClients, error) {
	h := &hostedClients{c: c, events: &http.Client{Transport: &http.Transport{DialContext: podDialer(c.forward, EventsPort)}}}
	var objs []runtime.Object
	for _, g := range groups(cs) {
		ss, err := c.clientSet(g)
		if err != nil {
			return nil, err
		}
		objs = append(objs, ss)
	}
	for i, cp := range cs {
		r := &loadfeed.Reader{URL: "http://" + c.namespace + "." + cp.Name, Token: c.cfg.Token, Client: h.events}
		h.clients = append(h.clients, &hostedClient{plan: cp, obs: obs[i], reader: r})
	}
	if err := c.api.Apply(ctx, objs); err != nil {
		return nil, fmt.Errorf("load clients: %w", err)
	}
	if err := c.api.WaitWorkloads(ctx, nil); err != nil {
		return nil, fmt.Errorf("load clients: %w", err)
	}
	for _, hc := range h.clients {
		if err := h.warmUp(ctx, hc); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// warmUp waits until client hc's events answer and it saw a call
// answered: the cluster's dataplane (kube-proxy, which the API does not
// show) serves its target. What it read waits in hc.pending.
func (h *hostedClients) warmUp(ctx context.Context, hc *hostedClient) error {
	h.refreshIP(hc)
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		evs, err := poll(ctx, hc.reader)
		hc.pending = append(hc.pending, evs...)
		if slices.ContainsFunc(evs, func(ev loadfeed.Event) bool { return ev.Kind == loadfeed.KindCall && ev.Code == codes.OK }) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("no call answered yet")
			}
			return fmt.Errorf("load client %s: %w: %w", hc.plan.Name, context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// refreshIP tells the client's observer its pod's address when it is new.
func (h *hostedClients) refreshIP(hc *hostedClient) {
	p, err := h.c.factory.Core().V1().Pods().Lister().Pods(h.c.namespace).Get(hc.plan.Name)
	if err != nil || p.DeletionTimestamp != nil {
		return
	}
	if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil && ip != hc.ip {
		hc.ip = ip
		hc.obs.Started(ip)
	}
}

// groups returns cs's clients by group, in order of first appearance.
func groups(cs []plan.Client) [][]plan.Client {
	var out [][]plan.Client
	for _, cp := range cs {
		i := slices.IndexFunc(out, func(g []plan.Client) bool { return g[0].Group == cp.Group })
		if i < 0 {
			out = append(out, nil)
			i = len(out) - 1
		}
		out[i] = append(out[i], cp)
	}
	return out
}

// clientSet is the StatefulSet of group g (its clients in order).
func (c *Cluster) clientSet(g []plan.Client) (*appsv1.StatefulSet, error) {
	name := g[0].Group
	for i, cp := range g {
		if want := name + "-" + strconv.Itoa(i); cp.Name != want {
			return nil, fmt.Errorf("client group %s: client %q, want %q", name, cp.Name, want)
		}
	}
	args, err := c.loadArgs(g[0])
	if err != nil {
		return nil, fmt.Errorf("client group %s: %w", name, err)
	}
	labels := map[string]string{ClientLabel: name, RunLabel: c.cfg.Run}
	replicas := int32(len(g))
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{ClientLabel: name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr(false), SecurityContext: podSecurity(), Containers: []corev1.Container{{
					Name: "load", Image: c.cfg.Image, ImagePullPolicy: corev1.PullIfNotPresent,
					Args: args, Env: podEnv(), Resources: podResources(), SecurityContext: containerSecurity(),
					Ports: []corev1.ContainerPort{{Name: "events", ContainerPort: EventsPort}},
				}}},
			},
		},
	}, nil
}

// loadArgs are the image's load command line for client cp: the flags
// of `pinlab-workload load`, from the settings runner.ClientConfig gives
// a local client. The cluster DNS of the pod's resolv.conf resolves its
// target.
func (c *Cluster) loadArgs(cp plan.Client) ([]string, error) {
	cfg := runner.ClientConfig(cp, "", nil)
	if cfg.Resolver != load.ResolverGRPC {
		return nil, fmt.Errorf("resolver %q: a load client pod resolves with grpc-go's DNS resolver only here", cfg.Resolver)
	}
	d := func(v time.Duration) string { return v.String() }
	args := []string{"load", "--target", cfg.Target, "--policy", cfg.Policy,
		"--rate", strconv.FormatFloat(cfg.Rate, 'g', -1, 64), "--timeout", d(cfg.Timeout),
		"--duration", d(c.cfg.LoadDuration), "--events-port", strconv.Itoa(EventsPort)}
	if cfg.PolicySettings != "" {
		args = append(args, "--policy-config", cfg.PolicySettings)
	}
	flag := func(on bool, f string) {
		if on {
			args = append(args, f)
		}
	}
	flag(cfg.HealthCheck, "--health-check")
	flag(cfg.WaitForReady, "--wait-for-ready")
	if cfg.Stream {
		args = append(args, "--stream", "--stream-length", d(cfg.StreamLength))
	}
	if cfg.MinResolutionInterval != 0 {
		args = append(args, "--min-resolution-interval", d(cfg.MinResolutionInterval))
	}
	if r := cfg.Retry; r != nil {
		args = append(args, "--retry-max-attempts", strconv.Itoa(r.MaxAttempts))
		if r.InitialBackoff != 0 {
			args = append(args, "--retry-initial-backoff", d(r.InitialBackoff))
		}
		if r.MaxBackoff != 0 {
			args = append(args, "--retry-max-backoff", d(r.MaxBackoff))
		}
		if r.BackoffMultiplier != 0 {
			args = append(args, "--retry-backoff-multiplier", strconv.FormatFloat(r.BackoffMultiplier, 'g', -1, 64))
		}
		if len(r.RetryableStatusCodes) > 0 {
			var s []byte
			for i, code := range r.RetryableStatusCodes {
				if i > 0 {
					s = append(s, ',')
				}
				s = strconv.AppendUint(s, uint64(code), 10)
			}
			args = append(args, "--retry-codes", string(s))
		}
	}
	return args, nil
}

// hostedClients are a variant's client pods (runner.HostedClients).
type hostedClients struct {
	c       *Cluster
	events  *http.Client
	clients []*hostedClient
}

// hostedClient is one client pod and its reader; Relay's goroutine for
// it owns reader and pending.
type hostedClient struct {
	plan    plan.Client
	obs     runner.HostedObserver
	reader  *loadfeed.Reader
	pending []loadfeed.Event // read by StartClients, not relayed yet
	ip      netip.Addr       // its pod's, as last told to obs
	// open counts the connections the client reported open, by remote;
	// restarts is how many new feeds the reader had found.
	open     map[netip.AddrPort]int
	restarts int
	lastAt   time.Time // the newest event's time reported so far
}

// closeRestarted reports, once the reader found the client's feed new
// (its pod was replaced: a restart step, a crash), every connection the
// old pod had open as closed by the client: their close events died with
// the pod, and the client's figures would count them open for ever. They
// are closed at the old pod's last event read (at, if none was), within
// a poll of its end, not at the time the new pod was found.
func (hc *hostedClient) closeRestarted(at time.Time) {
	if hc.reader.Restarts() == hc.restarts {
		return
	}
	if !hc.lastAt.IsZero() {
		at = hc.lastAt
	}
	hc.restarts = hc.reader.Restarts()
	for remote, n := range hc.open {
		for range n {
			hc.obs.Conn(load.ConnEvent{Remote: remote, Reason: load.ReasonClient}, at)
		}
	}
	clear(hc.open)
}

// feedLost is how long a client's events may go unread (a client pod
// restarting takes some seconds), or the reads of a backlog stay further
// behind its newest events than this, before the variant fails: its
// figures would miss the client's calls. A variable for tests.
var feedLost = 30 * time.Second

// pollEvery is how often Relay reads each client's events. A variable
// for tests.
var pollEvery = time.Second

// lastPoll bounds the read after the load ends.
const lastPoll = 5 * time.Second

// Relay reads each client's events every pollEvery, one goroutine each,
// and reports them (runner.HostedClients).
func (h *hostedClients) Relay(ctx context.Context, start time.Time) {
	var wg sync.WaitGroup
	for _, hc := range h.clients {
		wg.Go(func() { h.relay(ctx, hc, start) })
	}
	wg.Wait()
}

func (h *hostedClients) relay(ctx context.Context, hc *hostedClient, start time.Time) {
	hc.report(hc.pending, start)
	hc.pending = nil
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	log := h.c.cfg.logger()
	current := time.Now() // when the reader was last within feedLost of the client's newest events
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastPoll)
			evs, err := hc.reader.Poll(last)
			cancel()
			hc.closeRestarted(time.Now())
			hc.report(evs, start)
			if err != nil {
				log.Warn("load client: the last events were not read", "client", hc.plan.Name, "err", err)
			}
			return
		case <-t.C:
			h.refreshIP(hc)
			began := time.Now()
			evs, err := poll(ctx, hc.reader)
			hc.closeRestarted(time.Now())
			hc.report(evs, start)
			// Caught up (the read ended at the feed's end), or a read
			// that timed out after some pages, the newest less than
			// feedLost older than the read.
			if err == nil || len(evs) > 0 && began.Sub(hc.lastAt) < feedLost {
				current = time.Now()
			}
			// Events dropped while the variant was set up were due
			// before start: report leaves those out anyway.
			if n := hc.reader.LostFrom(start); n > 0 {
				h.c.fail(fmt.Errorf("load client %s: its pod dropped %d events before they were read, so the figures would miss its calls", hc.plan.Name, n))
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("load client: events not read to the end", "client", hc.plan.Name, "read", len(evs), "err", err)
				if behind := time.Since(current); behind > feedLost {
					h.c.fail(fmt.Errorf("load client %s: its events could not be read, or only %v or more after they were due, for %v, so the figures would miss its calls: %w", hc.plan.Name, feedLost, behind.Round(time.Second), err))
				}
			}
		}
	}
}

// pollTimeout bounds one read of a client's events, so that a stalled
// port-forward stream costs a read, not the client's figures.
const pollTimeout = adminTimeout

func poll(ctx context.Context, r *loadfeed.Reader) ([]loadfeed.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	return r.Poll(ctx)
}

// report gives events to the client's observer: calls and launches due
// from start on, every connection event.
func (hc *hostedClient) report(evs []loadfeed.Event, start time.Time) {
	for _, ev := range evs {
		if ev.At.After(hc.lastAt) {
			hc.lastAt = ev.At
		}
		switch ev.Kind {
		case loadfeed.KindCall:
			if !ev.At.Before(start) {
				hc.obs.Called(load.Result{Due: ev.At, Latency: time.Duration(ev.LatencyNs), Code: ev.Code, Cause: ev.Cause, Pod: ev.Pod, PodIP: ev.PodIP})
			}
		case loadfeed.KindSent:
			if !ev.At.Before(start) {
				hc.obs.Sent(ev.At, time.Duration(ev.LagNs))
			}
		case loadfeed.KindConn:
			remote, err := netip.ParseAddrPort(ev.Remote)
			if err != nil {
				continue
			}
			if hc.open == nil {
				hc.open = map[netip.AddrPort]int{}
			}
			if ev.Open {
				hc.open[remote]++
			} else if hc.open[remote] > 0 {
				hc.open[remote]--
			}
			ce := load.ConnEvent{Remote: remote, Open: ev.Open, Reason: ev.Reason}
			if ev.GoAwayAt != nil {
				ce.GoAwayAt = *ev.GoAwayAt
			}
			hc.obs.Conn(ce, ev.At)
		}
	}
}

// restartGrace is the grace period of a client pod deleted to restart
// it: the load client stops at once.
var restartGrace int64 = 1

// Restart deletes the named clients' pods; their StatefulSets start them
// again under the same names, with new channels (plan.Clients). Unlike a
// lab's client, which replaces its channel at once, a pod takes the
// cluster's time to come back.
func (h *hostedClients) Restart(names []string) error {
	var errs []error
	for _, n := range names {
		if !slices.ContainsFunc(h.clients, func(hc *hostedClient) bool { return hc.plan.Name == n }) {
			errs = append(errs, fmt.Errorf("no client %q", n))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		errs = append(errs, h.c.DeletePod(ctx, h.c.namespace, n, &restartGrace))
		cancel()
	}
	return errors.Join(errs...)
}

// Configure gives a whole client group new settings: its StatefulSet's
// args change and the StatefulSet replaces its pods one by one. A step
// that selects part of a group cannot run on a cluster.
func (h *hostedClients) Configure(next []plan.Client) error {
	var errs []error
	for _, g := range groups(next) {
		all := 0
		for _, hc := range h.clients {
			if hc.plan.Group == g[0].Group {
				all++
			}
		}
		if len(g) != all {
			errs = append(errs, fmt.Errorf("client group %s: %d of its %d clients changed; on a cluster a group's clients are one StatefulSet", g[0].Group, len(g), all))
			continue
		}
		args, err := h.c.loadArgs(g[0])
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			err = h.c.api.UpdateTemplate(ctx, "StatefulSet", h.c.namespace, g[0].Group, func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].Args = args
			})
			cancel()
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close closes the readers' connections; the pods go with the namespace.
func (h *hostedClients) Close() error {
	h.events.CloseIdleConnections()
	return nil
}
