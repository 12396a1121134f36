// Package loadpod is the pinlab image's load client, `pinlab load`: its
// flags and environment (Parse), its run (Run) and its events endpoint
// (package loadfeed's Handler on --events-port). The image's binary
// (cmd/pinlab-workload) runs it in a cluster's pod; the lab's kubelet runs
// the same code in-process for a container of the image whose args start
// with Command. What differs between the two, where the client dials from,
// which DNS server and Kubernetes API it asks, where it serves its events,
// is the Host Run is given.
package loadpod

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/lbpolicy"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/workload"
)

// Command is the image's subcommand of the load client: the first of a
// container's args (after any command that runs /pinlab), as
// workload.Command tells such a container apart.
const Command = workload.LoadCommand

// MaxDuration bounds --duration: every load loop ends.
const MaxDuration = 24 * time.Hour

// DefaultEventsPort is where the load client serves its events.
const DefaultEventsPort = 9480

// ListenIPEnv names the variable that makes the image's servers listen on
// one address instead of every address of the pod.
const ListenIPEnv = "PINLAB_LISTEN_IP"

// Options are the load command's flags and environment, as Parse reads
// them.
type Options struct {
	// Client is the client's config: name, target, policy, rate and the
	// rest of the flags, with InCluster set, as the image runs it in a
	// pod. Run sets Source, Dial, Kubernetes, Observer and Phase (and clears
	// InCluster on the lab's node, see Host).
	Client load.Config
	// Duration is how long the client calls: above 0, at most MaxDuration.
	Duration time.Duration
	// MinResolutionInterval is grpc-go's process-wide least time between
	// two DNS resolutions (--min-resolution-interval); 0 keeps grpc-go's
	// 30 s.
	MinResolutionInterval time.Duration
	// EventsPort is the port of the events endpoint (--events-port,
	// default DefaultEventsPort); 0 serves no events.
	EventsPort int
	// ListenIP is $PINLAB_LISTEN_IP, the address the events endpoint
	// listens on; the zero Addr means every address of the pod.
	ListenIP netip.Addr
	// Token is $PINLAB_TOKEN, the events endpoint's bearer token (checked
	// by pod.CheckToken); empty without an events endpoint.
	Token string
}

// Parse reads `load --target T --rate R --duration D [flags]` (args[0]
// is Command) and the environment getenv gives: $POD_NAME (the default
// --name, else $HOSTNAME, else "load"), $PINLAB_TOKEN (required with an
// events port) and $PINLAB_LISTEN_IP. Errors start with "load: " and name
// the flag or variable: a missing target, rate or duration, a duration
// over MaxDuration, a port that is not one, a negative interval, a
// resolver other than "grpc" and "kubernetes", a flag without the flag it
// refines, a retry code that is not a status code, a token pod.CheckToken
// refuses, a listen address that is not an IP.
func Parse(args []string, getenv func(string) string) (Options, error) {
	if len(args) == 0 || args[0] != Command {
		return Options{}, fmt.Errorf("load: args must start with %q", Command)
	}
	fs := pflag.NewFlagSet(Command, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o Options
	c := &o.Client
	fs.StringVar(&c.Name, "name", cmp.Or(getenv("POD_NAME"), getenv("HOSTNAME"), "load"), "the client's name (default $POD_NAME)")
	fs.StringVar(&c.Target, "target", "", "gRPC target, e.g. dns:///pricing.shop.svc.cluster.local:8471 or kubernetes:///pricing.shop:grpc")
	fs.StringVar(&c.Policy, "policy", "pick_first", "pick_first, round_robin, least_request, weighted_round_robin or ring_hash")
	fs.StringVar(&c.PolicySettings, "policy-config", "", "the policy's settings as JSON, with grpc-go's service config names (e.g. {\"choiceCount\":3})")
	fs.Float64Var(&c.Rate, "rate", 0, "calls per second, open loop")
	fs.DurationVar(&c.Timeout, "timeout", time.Second, "each call's deadline")
	fs.DurationVar(&o.Duration, "duration", 0, "how long to call (at most 24h)")
	fs.StringVar(&c.Resolver, "resolver", load.ResolverGRPC, "grpc (grpc-go's DNS resolver) or kubernetes (EndpointSlices, in-cluster credentials)")
	fs.BoolVar(&c.HealthCheck, "health-check", false, "client-side health checking (round_robin only)")
	fs.BoolVar(&c.WaitForReady, "wait-for-ready", false, "calls wait for a ready connection")
	fs.BoolVar(&c.Stream, "stream", false, "server streams of --stream-length instead of unary calls")
	fs.DurationVar(&c.StreamLength, "stream-length", 10*time.Second, "each stream's length")
	fs.DurationVar(&o.MinResolutionInterval, "min-resolution-interval", 0, "grpc-go's least time between two DNS resolutions (default grpc-go's 30s)")
	retries := fs.Int("retry-max-attempts", 0, "a retry policy with this many attempts (2-5); 0: none")
	var rp load.RetryPolicy
	fs.DurationVar(&rp.InitialBackoff, "retry-initial-backoff", 0, "the retry policy's initial backoff (default 100ms)")
	fs.DurationVar(&rp.MaxBackoff, "retry-max-backoff", 0, "the retry policy's max backoff (default 1s)")
	fs.Float64Var(&rp.BackoffMultiplier, "retry-backoff-multiplier", 0, "the retry policy's backoff multiplier (default 2)")
	retryCodes := fs.String("retry-codes", "", "comma-separated status codes to retry, by number (default 14, UNAVAILABLE)")
	fs.IntVar(&o.EventsPort, "events-port", DefaultEventsPort, "port of the events endpoint (token in $PINLAB_TOKEN); 0: none")
	if err := fs.Parse(args[1:]); err != nil {
		return o, fmt.Errorf("load: %w", workload.FlagError(err))
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("load: unexpected arguments %q", fs.Args())
	}
	if err := o.check(); err != nil {
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
	if o.EventsPort != 0 {
		if err := o.readEnv(getenv); err != nil {
			return o, err
		}
	}
	c.InCluster = true
	return o, nil
}

// check refuses flags with no meaning: a missing target, rate or
// duration, a duration over MaxDuration, a bad port or interval, a
// resolver the image does not take.
func (o *Options) check() error {
	switch r := o.Client.Resolver; {
	case o.Client.Target == "":
		return errors.New("load: --target is required")
	case !(o.Client.Rate > 0):
		return errors.New("load: --rate must be above 0")
	case o.Duration <= 0 || o.Duration > MaxDuration:
		return fmt.Errorf("load: --duration %v: want above 0 and at most %v", o.Duration, MaxDuration)
	case o.EventsPort < 0 || o.EventsPort > 65535:
		return fmt.Errorf("load: --events-port %d is not a TCP port", o.EventsPort)
	case o.MinResolutionInterval < 0:
		return errors.New("load: --min-resolution-interval must not be negative")
	case r != load.ResolverGRPC && r != load.ResolverKubernetes:
		// The "cached" and "once" resolvers query the lab's DNS from a
		// lab address (load.Config.InCluster).
		return fmt.Errorf("load: --resolver %q: want %q or %q", r, load.ResolverGRPC, load.ResolverKubernetes)
	}
	if _, err := lbpolicy.Parse(o.Client.Policy, o.Client.PolicySettings); err != nil {
		return fmt.Errorf("load: --policy %s --policy-config %q: %w", o.Client.Policy, o.Client.PolicySettings, err)
	}
	return nil
}

// readEnv reads the events endpoint's token and listen address.
func (o *Options) readEnv(getenv func(string) string) error {
	o.Token = getenv(pod.TokenEnv)
	if err := pod.CheckToken(o.Token); err != nil {
		return fmt.Errorf("load: %w (or give --events-port 0)", err)
	}
	s := getenv(ListenIPEnv)
	if s == "" {
		return nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("load: $%s %q is not an IP address", ListenIPEnv, s)
	}
	o.ListenIP = ip
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
