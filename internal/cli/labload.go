package cli

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
)

// LoadOptions are the inputs of `pinlab lab load`.
type LoadOptions struct {
	CtlOptions
	// Target is a gRPC target: a Service as "NAME:PORT" (resolved through
	// the lab's DNS as NAME.NAMESPACE.svc.cluster.local), or a full
	// target ("dns://...", "passthrough:///IP:PORT").
	Target string
	// Clients is how many clients run, each with one gRPC channel.
	Clients int
	// Rate is each client's calls per second.
	Rate float64
	// Policy is pick_first or round_robin.
	Policy string
	// From names the lab pods the clients dial from, as app=LABEL
	// selector value of a Deployment ("deployment/order": the pods of
	// Deployment order, one client per pod, round robin); empty dials from
	// 127.0.1.1, 127.0.1.2, ... (addresses of no pod: clients outside the
	// cluster).
	From string
	// Duration stops the load after it; zero runs until Ctrl-C.
	Duration time.Duration
}

// NewCmdLabLoad returns `pinlab lab load`.
func NewCmdLabLoad(stdout, stderr io.Writer) *cobra.Command {
	o := &LoadOptions{CtlOptions: CtlOptions{Out: stdout, Err: stderr}}
	cmd := &cobra.Command{
		Use:   "load TARGET",
		Short: "Call a running lab's Service with real gRPC clients until Ctrl-C (for pinlab diagnose)",
		Long: `Run --clients gRPC clients (pinlab's load clients: one channel each, an
open-loop schedule of --rate calls/s) against TARGET in the running lab, until
Ctrl-C or --duration, then print the calls each pod answered. If the lab
stops (its control API fails 3 checks a second apart), the clients stop and
lab load exits 1 saying so. TARGET is a
Service as NAME:PORT, resolved through the lab's DNS as
NAME.NAMESPACE.svc.cluster.local, or a gRPC target (dns://..., passthrough:///IP:PORT).
With --from deployment/NAME the clients dial from the IPs of that Deployment's
pods (one client per pod), so that diagnose names them.`,
		Example: "  pinlab lab load pricing:8471 -n shop --clients 4 --rate 250\n  pinlab lab load pricing-headless:8471 -n shop --policy round_robin --from deployment/order",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("lab load takes one target such as pricing:8471, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Target = args[0]
			if o.Clients < 1 || o.Clients > 1000 || o.Rate <= 0 || o.Rate > 100000 {
				return usageError{fmt.Errorf("--clients %d, --rate %g: want 1 to 1000 clients and a rate above 0, at most 100000", o.Clients, o.Rate)}
			}
			if !slices.Contains(load.Policies, o.Policy) {
				return usageError{fmt.Errorf("--policy %q: want one of %v", o.Policy, load.Policies)}
			}
			return labLoad(cmd.Context(), o)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.IntVar(&o.Clients, "clients", 4, "clients, one gRPC channel each")
	f.Float64Var(&o.Rate, "rate", 100, "calls per second of each client")
	f.StringVar(&o.Policy, "policy", "pick_first", "load balancing policy: pick_first or round_robin")
	f.StringVar(&o.From, "from", "", "deployment/NAME: dial from the IPs of its pods (default 127.0.1.N, no pod's; on a real control plane the top of the pod range, 10.244.254.N)")
	f.DurationVar(&o.Duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	return cmd
}

// served counts calls per answering pod.
type served struct {
	mu       sync.Mutex
	byPod    map[string]int64
	failed   int64
	byCode   map[string]int64 // failed calls by gRPC code
	lastFail string           // the last failed call's error
}

func (s *served) Called(r load.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Err != nil || r.Pod == "" {
		s.failed++
		if s.byCode == nil {
			s.byCode = map[string]int64{}
		}
		s.byCode[r.Code.String()]++
		if r.Err != nil {
			s.lastFail = r.Err.Error()
		}
		return
	}
	s.byPod[r.Pod]++
}

// allFailed returns an error when calls were made and none succeeded.
func (s *served) allFailed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == 0 || len(s.byPod) > 0 {
		return nil
	}
	return fmt.Errorf("lab load: all %d calls failed (the last: %s)", s.failed, s.lastFail)
}
func (s *served) Conn(load.ConnEvent) {}

func labLoad(ctx context.Context, o *LoadOptions) error {
	if o.Duration < 0 {
		return usageError{fmt.Errorf("--duration %v: want a positive duration, or 0 to run until Ctrl-C", o.Duration)}
	}
	c := o.client()
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if err := reachable(info, "lab load", c); err != nil {
		return err
	}
	sources, err := o.sources(ctx, info.PodCIDR)
	if err != nil {
		return err
	}
	target := o.Target
	if !strings.Contains(target, "://") {
		host, port, ok := strings.Cut(target, ":")
		if !ok || host == "" {
			return usageError{fmt.Errorf("target %q: want NAME:PORT or a gRPC target", target)}
		}
		if !strings.Contains(host, ".") {
			host += "." + o.Namespace + ".svc.cluster.local"
		}
		target = fmt.Sprintf("dns://%s/%s:%s", info.DNS, host, port)
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	gone := make(chan error, 1)
	go func() { gone <- watchLab(ctx, c, stop) }()
	s := &served{byPod: map[string]int64{}}
	var wg sync.WaitGroup
	for i := range o.Clients {
		cl, err := load.New(load.Config{Name: fmt.Sprintf("load-%d", i), Source: sources[i%len(sources)], Target: target, Policy: o.Policy, Rate: o.Rate, Observer: s})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl.Run(ctx)
		}()
	}
	fmt.Fprintf(o.Out, "%d clients calling %s (%s), %g calls/s each, from %s; stop with Ctrl-C\n", o.Clients, target, o.Policy, o.Rate, sourceList(sources))
	start := time.Now()
	wg.Wait()
	stop()
	err = <-gone
	printServed(o.Out, s, time.Since(start))
	if err != nil {
		return fmt.Errorf("lab load: the lab at %s stopped answering (%d checks %v apart failed, the last: %w); stopped the clients", c.Addr, labMisses, labCheckEvery, err)
	}
	return s.allFailed() // else Ctrl-C and --duration are the normal end
}

// How lab load notices that the lab stopped: it asks the control API for
// the lab's info every labCheckEvery (each bounded by labCheckTimeout) and
// stops after labMisses failures in a row.
const (
	labCheckEvery   = time.Second
	labCheckTimeout = 2 * time.Second
	labMisses       = 3
)

// watchLab asks c for the lab's info every labCheckEvery until ctx ends
// (then it returns nil); after labMisses failures in a row it calls stop
// and returns the last error.
func watchLab(ctx context.Context, c *control.Client, stop context.CancelFunc) error {
	t := time.NewTicker(labCheckEvery)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, labCheckTimeout)
		_, err := c.Info(ictx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			misses = 0
		default:
			if misses++; misses == labMisses {
				stop()
				return err
			}
		}
	}
}

// sources returns the IPs the clients dial from.
func (o *LoadOptions) sources(ctx context.Context, podCIDR string) ([]netip.Addr, error) {
	if o.From == "" {
		base := netip.AddrFrom4([4]byte{127, 0, 1, 0})
		if p, err := netip.ParsePrefix(podCIDR); err == nil && !p.Addr().IsLoopback() && p.Addr().Is4() && p.Bits() <= 22 {
			// On a real control plane the lab's pods are not on loopback,
			// and a connection from loopback to a pod reads as an in-pod
			// sidecar's: dial from the top of the pod range instead
			// (10.244.254.1, ...), which no pod gets (they count up from
			// its start).
			a := p.Masked().Addr().As4()
			n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
			n += 1<<(32-p.Bits()) - 512
			base = netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
		}
		var out []netip.Addr
		for i := range o.Clients {
			a := base.As4()
			a[3] = byte(1 + i%250)
			out = append(out, netip.AddrFrom4(a))
		}
		return out, nil
	}
	kind, name, ok := strings.Cut(o.From, "/")
	if !ok || kindAliases[strings.ToLower(kind)] != "Deployment" {
		return nil, usageError{fmt.Errorf("--from %q: want deployment/NAME", o.From)}
	}
	objs, err := o.client().Objects(ctx)
	if err != nil {
		return nil, err
	}
	var sel map[string]string
	for _, d := range objs.Deployments {
		if d.Namespace == o.Namespace && d.Name == name && d.Spec.Selector != nil {
			sel = d.Spec.Selector.MatchLabels
		}
	}
	if sel == nil {
		return nil, fmt.Errorf("--from %s: no Deployment %q in namespace %q", o.From, name, o.Namespace)
	}
	var out []netip.Addr
	for _, p := range objs.Pods {
		if p.Namespace != o.Namespace || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning || !matches(sel, p.Labels) {
			continue
		}
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--from %s: no running pod with an IP", o.From)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func sourceList(ips []netip.Addr) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	if len(s) > 4 {
		return strings.Join(s[:4], ", ") + fmt.Sprintf(" and %d more", len(s)-4)
	}
	return strings.Join(s, ", ")
}

func printServed(w io.Writer, s *served, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pods := make([]string, 0, len(s.byPod))
	for p := range s.byPod {
		pods = append(pods, p)
	}
	slices.Sort(pods)
	fmt.Fprintf(w, "\ncalls answered per pod over %.1fs (%d failed%s):\n", took.Seconds(), s.failed, failedCodes(s.byCode))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCALLS\tCALLS/S")
	for _, p := range pods {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\n", p, s.byPod[p], float64(s.byPod[p])/took.Seconds())
	}
	tw.Flush()
}

// failedCodes lists failed calls by code (": DeadlineExceeded 3, ...").
func failedCodes(byCode map[string]int64) string {
	if len(byCode) == 0 {
		return ""
	}
	codes := make([]string, 0, len(byCode))
	for c := range byCode {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for i, c := range codes {
		codes[i] = fmt.Sprintf("%s %d", c, byCode[c])
	}
	return ": " + strings.Join(codes, ", ")
}
