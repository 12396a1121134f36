package loadpod

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcdns "google.golang.org/grpc/resolver/dns"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/pod"
	kuberesolver "github.com/pinlab/pinlab/resolver/kubernetes"
)

// Host is where Run runs the client: what differs between the image's
// container in a real cluster (the zero Host but for its writers) and the
// lab's node, which runs it in-process, in the node's network namespace
// or, for a pod with a namespace of its own, with its sockets opened in
// the pod's (Dial, Listen).
type Host struct {
	// Source is the address the client dials from. The zero Addr is a
	// real pod's: any address (the pod's own), any target, as a client in
	// the pod (load.Config.InCluster). A valid one is the lab's: the pod
	// IP, inside the lab's addresses, and then the client takes only the
	// targets load.CheckTarget takes (a DNS server of the lab's,
	// passthrough to a lab address, or the Kubernetes resolver).
	Source netip.Addr
	// Dial, with a valid Source, opens the client's sockets (its
	// connections and its DNS queries, load.Config.Dial) from Source:
	// the lab's node gives one for a pod with its own network namespace,
	// which dials inside it, as a process in the pod would. Nil: they
	// are opened in this process's namespace, where Source is local (the
	// lab's node when pods share its namespace). Unused without Source.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DNS is the DNS server ("IP:port") that resolves, on the lab's node
	// (with Source), targets a pod resolves through its resolv.conf:
	// dns:///NAME:PORT and a target without a scheme (grpc-go's default)
	// become dns://DNS/NAME:PORT. Names are looked up as written: there is
	// no pod search path, so write them whole
	// (pricing.shop.svc.cluster.local). Empty: targets stay as given.
	DNS string
	// Kubernetes is the API the "kubernetes" resolver watches; nil: the
	// pod's own, through its service account (rest.InClusterConfig).
	Kubernetes kuberesolver.Client
	// EventsIP is the address the events endpoint listens on; the zero
	// Addr means Options.ListenIP, and when that is zero every address
	// of the pod.
	EventsIP netip.Addr
	// Listen opens the events endpoint's listener on addr ("IP:port",
	// ":port" for every address); nil: net.Listen over TCP. The lab's
	// node gives one that checks addr (package loopback) and, for a pod
	// with its own network namespace, listens inside it, on the pod IP,
	// where the kubelet API's port-forward dials it.
	Listen func(ctx context.Context, addr string) (net.Listener, error)
	// SetMinResolutionInterval applies --min-resolution-interval, which
	// is grpc-go's process-wide setting; nil sets it, as the container's
	// process is the client's alone. An error refuses the flag: Run then
	// returns 1.
	SetMinResolutionInterval func(time.Duration) error
	// Stdout receives the client's lines (when it starts, when the load
	// ends), Stderr why it could not start; nil discards them.
	Stdout, Stderr io.Writer
}

// Run runs the client o describes for o.Duration, serving its events from
// the start until ctx ends (SIGTERM to the image's process), also after
// the load so that the last events can be read, and returns the
// process's exit code: 0 when stopped (early, or after the load; at once
// after the load without an events endpoint), 1 when it could not start
// (no Kubernetes API for the "kubernetes" resolver, the events port
// taken), 2 when load.New refuses the config (e.g. a target the lab's
// node cannot resolve). It returns once everything it started has ended.
func Run(ctx context.Context, o Options, h Host) int {
	stdout, stderr := cmp.Or[io.Writer](h.Stdout, io.Discard), cmp.Or[io.Writer](h.Stderr, io.Discard)
	cfg := o.Client
	name := cfg.Name
	feed := loadfeed.NewFeed(0)
	counts := &tally{}
	cfg.Observer = tee{feed, counts}
	cfg.Phase = time.Duration(rand.Float64() * float64(time.Second) / cfg.Rate)
	if h.Source.IsValid() {
		cfg.InCluster, cfg.Source, cfg.Dial = false, h.Source, h.Dial
		cfg.Target = h.target(cfg.Target)
	}
	if err := h.minResolution(o.MinResolutionInterval); err != nil {
		fmt.Fprintf(stderr, "pinlab load %s: --min-resolution-interval: %v\n", name, err)
		return 1
	}
	if cfg.Resolver == load.ResolverKubernetes {
		var err error
		if cfg.Kubernetes, err = h.kubernetes(); err != nil {
			fmt.Fprintf(stderr, "pinlab load %s: %v\n", name, err)
			return 1
		}
	}
	c, err := load.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "pinlab %v\n", err)
		return 2
	}
	defer c.Close()
	addr := h.eventsAddr(o)
	stopEvents, err := h.serveEvents(ctx, addr, loadfeed.Handler(feed, o.Token))
	if err != nil {
		fmt.Fprintf(stderr, "pinlab load %s: events: %v\n", name, err)
		return 1
	}
	defer stopEvents()
	fmt.Fprintf(stdout, "pinlab load %s: %s at %g calls/s (%s) for %v%s\n", name, cfg.Target, cfg.Rate, cfg.Policy, o.Duration, eventsText(addr))
	c.Connect()
	lctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	c.Run(lctx)
	if ctx.Err() != nil {
		fmt.Fprintf(stdout, "pinlab load %s: %v: stopped early; %s\n", name, context.Cause(ctx), counts)
		return 0
	}
	fmt.Fprintf(stdout, "pinlab load %s: done; %s\n", name, counts)
	if addr != "" {
		<-ctx.Done() // the events stay readable until the pod is stopped
	}
	return 0
}

// Main is the image's load command as a container's process runs it:
// Parse of args and getenv, then Run on h. Bad args are written to
// h.Stderr ("pinlab load: ...") and return 2, as the image's binary
// does (which adds its usage).
func Main(ctx context.Context, args []string, getenv func(string) string, h Host) int {
	o, err := Parse(args, getenv)
	if err != nil {
		fmt.Fprintf(cmp.Or[io.Writer](h.Stderr, io.Discard), "pinlab %v\n", err)
		return 2
	}
	return Run(ctx, o, h)
}

// target is the client's target on the lab's node: dns:/// and
// scheme-less targets through h.DNS when there is one.
func (h Host) target(t string) string {
	if h.DNS == "" {
		return t
	}
	if rest, ok := strings.CutPrefix(t, "dns:///"); ok {
		return "dns://" + h.DNS + "/" + rest
	}
	if !strings.Contains(t, "://") {
		return "dns://" + h.DNS + "/" + t
	}
	return t
}

func (h Host) minResolution(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if h.SetMinResolutionInterval != nil {
		return h.SetMinResolutionInterval(d)
	}
	grpcdns.SetMinResolutionInterval(d)
	return nil
}

// kubernetes is the API of the "kubernetes" resolver: h.Kubernetes, else
// the pod's through its service account.
func (h Host) kubernetes() (kuberesolver.Client, error) {
	if h.Kubernetes != nil {
		return h.Kubernetes, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("--resolver kubernetes needs the pod's service account: %w", err)
	}
	return kubernetes.NewForConfig(rc)
}

// eventsAddr is where the events endpoint listens: "" for none.
func (h Host) eventsAddr(o Options) string {
	if o.EventsPort == 0 {
		return ""
	}
	ip := cmp.Or(h.EventsIP, o.ListenIP)
	host := ""
	if ip.IsValid() {
		host = ip.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(o.EventsPort))
}

func eventsText(addr string) string {
	if addr == "" {
		return ""
	}
	return ", events on " + addr
}

// serveEvents serves handler on addr ("" none) until the returned stop is
// called, which waits for the server's end.
func (h Host) serveEvents(ctx context.Context, addr string, handler http.Handler) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	listen := h.Listen
	if listen == nil {
		listen = func(ctx context.Context, addr string) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, "tcp", addr)
		}
	}
	ln, err := listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return pod.ServeEndpoint(ln, handler), nil
}

// tee is two observers as one.
type tee struct {
	feed *loadfeed.Feed
	t    *tally
}

func (t tee) Called(r load.Result)                  { t.feed.Called(r); t.t.called(r) }
func (t tee) Conn(c load.ConnEvent)                 { t.feed.Conn(c) }
func (t tee) Sent(due time.Time, lag time.Duration) { t.feed.Sent(due, lag) }

// tally counts calls by pod, for the closing line of the log.
type tally struct {
	mu     sync.Mutex
	calls  int
	failed int
	pods   map[string]int
}

func (t *tally) called(r load.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	if r.Code != codes.OK {
		t.failed++
		return
	}
	if t.pods == nil {
		t.pods = map[string]int{}
	}
	t.pods[r.Pod]++
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var by []string
	for _, p := range slices.Sorted(maps.Keys(t.pods)) {
		by = append(by, fmt.Sprintf("%s %d", p, t.pods[p]))
	}
	return fmt.Sprintf("%d calls, %d failed; by pod: %s", t.calls, t.failed, cmp.Or(strings.Join(by, ", "), "none"))
}
