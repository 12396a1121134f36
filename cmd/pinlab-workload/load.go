package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	grpcdns "google.golang.org/grpc/resolver/dns"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/pod"
)

// MaxLoadDuration bounds --duration: every load loop ends.
const MaxLoadDuration = 24 * time.Hour

// DefaultEventsPort is where the load command serves its events.
const DefaultEventsPort = 9480

// loadOptions are the load command's flags and environment.
type loadOptions struct {
	cfg        load.Config
	duration   time.Duration
	minResolve time.Duration // process-wide grpc-go setting; 0 keeps grpc-go's 30 s
	eventsAddr string        // "" serves no events
	token      string
}

// parseLoad reads `load --target T --rate R --duration D [flags]`.
func parseLoad(args []string, getenv func(string) string) (loadOptions, error) {
	fs := pflag.NewFlagSet("load", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o loadOptions
	c := &o.cfg
	host, _ := os.Hostname()
	fs.StringVar(&c.Name, "name", cmp.Or(getenv("POD_NAME"), host, "load"), "the client's name (default $POD_NAME)")
	fs.StringVar(&c.Target, "target", "", "gRPC target, e.g. dns:///pricing.shop.svc.cluster.local:8471 or kubernetes:///pricing.shop:grpc")
	fs.StringVar(&c.Policy, "policy", "pick_first", "pick_first or round_robin")
	fs.Float64Var(&c.Rate, "rate", 0, "calls per second, open loop")
	fs.DurationVar(&c.Timeout, "timeout", time.Second, "each call's deadline")
	fs.DurationVar(&o.duration, "duration", 0, "how long to call (at most 24h)")
	fs.StringVar(&c.Resolver, "resolver", load.ResolverGRPC, "grpc (grpc-go's DNS resolver) or kubernetes (EndpointSlices, in-cluster credentials)")
	fs.BoolVar(&c.HealthCheck, "health-check", false, "client-side health checking (round_robin only)")
	fs.BoolVar(&c.WaitForReady, "wait-for-ready", false, "calls wait for a ready connection")
	fs.BoolVar(&c.Stream, "stream", false, "server streams of --stream-length instead of unary calls")
	fs.DurationVar(&c.StreamLength, "stream-length", 10*time.Second, "each stream's length")
	fs.DurationVar(&o.minResolve, "min-resolution-interval", 0, "grpc-go's least time between two DNS resolutions (default grpc-go's 30s)")
	retries := fs.Int("retry-max-attempts", 0, "a retry policy with this many attempts (2-5); 0: none")
	var rp load.RetryPolicy
	fs.DurationVar(&rp.InitialBackoff, "retry-initial-backoff", 0, "the retry policy's initial backoff (default 100ms)")
	fs.DurationVar(&rp.MaxBackoff, "retry-max-backoff", 0, "the retry policy's max backoff (default 1s)")
	fs.Float64Var(&rp.BackoffMultiplier, "retry-backoff-multiplier", 0, "the retry policy's backoff multiplier (default 2)")
	retryCodes := fs.String("retry-codes", "", "comma-separated status codes to retry, by number (default 14, UNAVAILABLE)")
	port := fs.Int("events-port", DefaultEventsPort, "port of the events endpoint (token in $PINLAB_TOKEN); 0: none")
	if err := fs.Parse(args[1:]); err != nil {
		return o, fmt.Errorf("load: %w", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("load: unexpected arguments %q", fs.Args())
	}
	if err := o.check(*port); err != nil {
		return o, err
	}
	if err := dependentFlags(fs); err != nil {
		return o, err
	}
	if *retries != 0 {
		rp.MaxAttempts = *retries
		codes, err := parseCodes(*retryCodes)
		if err != nil {
			return o, err
		}
		rp.RetryableStatusCodes = codes
		c.Retry = &rp
	}
	if *port != 0 {
		var err error
		if o.token, err = token(getenv); err != nil {
			return o, fmt.Errorf("load: %w (or give --events-port 0)", err)
		}
		ip, err := listenIP(getenv)
		if err != nil {
			return o, fmt.Errorf("load: %w", err)
		}
		o.eventsAddr = net.JoinHostPort(ip, strconv.Itoa(*port))
	}
	c.InCluster = true
	return o, nil
}

// check refuses flags with no meaning: a missing target, rate or
// duration, a duration over MaxLoadDuration, a bad port or interval.
func (o *loadOptions) check(port int) error {
	switch {
	case o.cfg.Target == "":
		return errors.New("load: --target is required")
	case !(o.cfg.Rate > 0):
		return errors.New("load: --rate must be above 0")
	case o.duration <= 0 || o.duration > MaxLoadDuration:
		return fmt.Errorf("load: --duration %v: want above 0 and at most %v", o.duration, MaxLoadDuration)
	case port < 0 || port > 65535:
		return fmt.Errorf("load: --events-port %d is not a TCP port", port)
	case o.minResolve < 0:
		return errors.New("load: --min-resolution-interval must not be negative")
	}
	return nil
}

// dependentFlags refuses flags given without the flag they refine.
func dependentFlags(fs *pflag.FlagSet) error {
	for _, f := range []string{"retry-initial-backoff", "retry-max-backoff", "retry-backoff-multiplier", "retry-codes"} {
		if fs.Changed(f) && !fs.Changed("retry-max-attempts") {
			return fmt.Errorf("load: --%s needs --retry-max-attempts", f)
		}
	}
	if fs.Changed("stream-length") && !fs.Changed("stream") {
		return errors.New("load: --stream-length needs --stream")
	}
	return nil
}

// parseCodes reads "14,4" as status codes.
func parseCodes(s string) ([]codes.Code, error) {
	var out []codes.Code
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil || n == 0 || n > 16 {
			return nil, fmt.Errorf("load: --retry-codes: %q is not a status code from 1 to 16", f)
		}
		out = append(out, codes.Code(n))
	}
	return out, nil
}

// loadRun runs the client for the duration, serving its events from the
// start until a signal on sig (after the load too, so the last events
// can be read), and returns the exit code.
func loadRun(o loadOptions, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	feed := loadfeed.NewFeed(0)
	counts := &tally{}
	o.cfg.Observer = tee{feed, counts}
	o.cfg.Phase = time.Duration(rand.Float64() * float64(time.Second) / o.cfg.Rate)
	if o.minResolve > 0 {
		grpcdns.SetMinResolutionInterval(o.minResolve)
	}
	if o.cfg.Resolver == load.ResolverKubernetes {
		rc, err := rest.InClusterConfig()
		if err != nil {
			fmt.Fprintf(stderr, "pinlab load %s: --resolver kubernetes needs the pod's service account: %v\n", o.cfg.Name, err)
			return 1
		}
		if o.cfg.Kubernetes, err = kubernetes.NewForConfig(rc); err != nil {
			fmt.Fprintf(stderr, "pinlab load %s: %v\n", o.cfg.Name, err)
			return 1
		}
	}
	c, err := load.New(o.cfg)
	if err != nil {
		fmt.Fprintf(stderr, "pinlab %v\n", err)
		return 2
	}
	defer c.Close()
	stopEvents, err := serveEvents(o, feed)
	if err != nil {
		fmt.Fprintf(stderr, "pinlab load %s: events: %v\n", o.cfg.Name, err)
		return 1
	}
	defer stopEvents()
	fmt.Fprintf(stdout, "pinlab load %s: %s at %g calls/s (%s) for %v%s\n", o.cfg.Name, o.cfg.Target, o.cfg.Rate, o.cfg.Policy, o.duration, eventsText(o))
	c.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		c.Run(ctx)
	}()
	select {
	case s := <-sig:
		cancel()
		<-ran
		fmt.Fprintf(stdout, "pinlab load %s: %v: stopped early; %s\n", o.cfg.Name, s, counts)
		return 0
	case <-ran:
	}
	fmt.Fprintf(stdout, "pinlab load %s: done; %s\n", o.cfg.Name, counts)
	if o.eventsAddr == "" {
		return 0
	}
	<-sig // the events stay readable until the pod is stopped
	return 0
}

func eventsText(o loadOptions) string {
	if o.eventsAddr == "" {
		return ""
	}
	return ", events on " + o.eventsAddr
}

// serveEvents serves the feed's Handler on o.eventsAddr until the
// returned stop is called.
func serveEvents(o loadOptions, feed *loadfeed.Feed) (stop func(), err error) {
	if o.eventsAddr == "" {
		return func() {}, nil
	}
	return serveHTTP(o.eventsAddr, loadfeed.Handler(feed, o.token))
}

// serveHTTP serves h on addr, with timeouts and a header limit, until the
// returned stop is called.
func serveHTTP(addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := pod.EndpointServer(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return func() {
		srv.Close()
		<-done
	}, nil
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
